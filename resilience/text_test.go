package resilience_test

import (
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

func TestRetryKindJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for _, k := range []resilience.RetryKind{resilience.ItemRetry, resilience.NodeRestart, resilience.NodeRetry} {
		b, err := json.Marshal(k)
		require.NoError(t, err)
		assert.Equal(t, `"`+k.String()+`"`, string(b))
		var back resilience.RetryKind
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, k, back)
	}
	var k resilience.RetryKind
	assert.Error(t, json.Unmarshal([]byte(`"sometimes"`), &k))
	_, err := json.Marshal(resilience.RetryKind(42))
	assert.Error(t, err)
}
