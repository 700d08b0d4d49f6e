package cli_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/samples/internal/cli"
)

func TestNoArgs(t *testing.T) {
	t.Parallel()
	require.NoError(t, cli.NoArgs(nil))
	require.NoError(t, cli.NoArgs([]string{}))
	err := cli.NoArgs([]string{"extra", "more"})
	require.Error(t, err)
	assert.Equal(t, `unexpected argument "extra" (see -help)`, err.Error())
}
