package cli_test

import (
	"errors"
	"strings"
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

func TestFailNamesTheSampleOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ err, want string }{
		{"rabbitmq: connect to amqp://x: refused", "rabbitmq: connect to amqp://x: refused\n"},
		{"connect: refused", "rabbitmq: connect: refused\n"},
		{"rabbitmqx: other", "rabbitmq: rabbitmqx: other\n"},
		{"", "rabbitmq: \n"},
	} {
		var b strings.Builder
		cli.Fail(&b, "rabbitmq", errors.New(tc.err))
		assert.Equal(t, tc.want, b.String(), "error %q", tc.err)
	}
}
