package runname_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/samples/internal/runname"
)

func TestNames(t *testing.T) {
	a, err := runname.New()
	require.NoError(t, err)
	b, err := runname.New()
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "two runs, two names")
	name := runname.Msg(a, 42)
	assert.True(t, runname.Of(a, name))
	assert.False(t, runname.Of(b, name))
	for in, want := range map[string]int{name: 42, "msg-7": 7} {
		i, ok := runname.Index(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, i, in)
	}
	// A body that no sample named (another producer's) is no message of
	// any run, not a panic.
	for _, in := range []string{"", "ab", "msg-", "msg-x", "order 7"} {
		_, ok := runname.Index(in)
		assert.False(t, ok, in)
	}
}
