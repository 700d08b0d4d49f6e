package nats_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
)

// fields returns the Field of every ConfigError joined in err.
func fields(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		var ce *nats.ConfigError
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		} else if errors.As(e, &ce) {
			out = append(out, ce.Field)
		}
	}
	walk(err)
	return out
}

// Every problem of a config is reported at once, each naming its field.
func TestSourceConfigErrorsNameTheirFields(t *testing.T) {
	cases := []struct {
		name string
		cfg  nats.SourceConfig
		want []string
	}{
		{"empty", nats.SourceConfig{}, []string{"URL", "Stream", "Consumer"}},
		{"bad names and URL", nats.SourceConfig{URL: "amqp://x", Stream: "a.b", Consumer: "c d"}, []string{"URL", "Stream", "Consumer"}},
		{"negative", nats.SourceConfig{URL: "nats://x:4222", Stream: "s", Consumer: "c", AckWait: -1, MaxDeliver: -1, Batch: -1,
			PullWait: -1, ProgressInterval: -1, MaxDeliveries: -1, MaxAckPending: -1, DialTimeout: -1, CloseTimeout: -1, DrainTimeout: -1,
			CrashAloneWait: -1},
			[]string{"AckWait", "MaxDeliver", "MaxAckPending", "Batch", "PullWait", "ProgressInterval", "MaxDeliveries", "DialTimeout", "CloseTimeout", "DrainTimeout", "CrashAloneWait"}},
		{"backoff longer than deliveries", nats.SourceConfig{URL: "nats://x", Stream: "s", Consumer: "c",
			BackOff: []time.Duration{time.Second, 0}, MaxDeliver: 2}, []string{"BackOff[1]", "MaxDeliver"}},
		{"retry without limit or delay", nats.SourceConfig{URL: "nats://x", Stream: "s", Consumer: "c",
			Retry: nats.BrokerRetry{Enabled: true, HandOffAfter: -1}}, []string{"MaxDeliver", "Retry.Delay", "Retry.HandOffAfter"}},
		{"guard past the limit", nats.SourceConfig{URL: "nats://x", Stream: "s", Consumer: "c", MaxDeliver: 3, MaxDeliveries: 3}, []string{"MaxDeliveries"}},
		{"progress too slow", nats.SourceConfig{URL: "nats://x", Stream: "s", Consumer: "c", AckWait: time.Second, ProgressInterval: time.Second}, []string{"ProgressInterval"}},
		{"declare without subjects", nats.SourceConfig{URL: "nats://x", Stream: "s", Consumer: "c", Declare: &nats.StreamDeclaration{}}, []string{"Declare.Subjects"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := nats.NewSource(c.cfg)
			require.Error(t, err)
			assert.ErrorIs(t, err, nats.ErrInvalidConfig)
			assert.Equal(t, c.want, fields(err))
			for _, line := range strings.Split(err.Error(), "\n") {
				assert.True(t, strings.HasPrefix(line, "nats: "), line)
			}
		})
	}
	_, err := nats.NewSource(nats.SourceConfig{URL: "nats://a:1,nats://b:2", Stream: "s", Consumer: "c"})
	assert.NoError(t, err, "a list of servers")
	_, err = nats.NewSource(nats.SourceConfig{URL: "nats://a", Stream: "s", Consumer: "c", BackOff: []time.Duration{time.Second}})
	assert.Equal(t, []string{"MaxDeliver"}, fields(err), "BackOff without a MaxDeliver limit: the server refuses it")
}

func TestPublisherConfigErrorsNameTheirFields(t *testing.T) {
	_, err := nats.NewPublisher(nats.PublisherConfig[string]{AckTimeout: -1, PubRetry: nats.PubRetry{MaxRetry: 101, Delay: -1}})
	require.Error(t, err)
	assert.Equal(t, []string{"Message", "Subject", "URL", "AckTimeout", "PubRetry.MaxRetry", "PubRetry.Delay"}, fields(err))
}

// Open creates the stream from Declare and the consumer, and checks them
// when they exist: a missing stream without Declare, or a consumer with
// other settings, is refused, permanently, naming the field.
func TestOpenCreatesOrChecks(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	a.cleanup(name)
	ctx := testContext(t)

	cfg := a.config(name)
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	err = src.Open(ctx)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	assert.Contains(t, err.Error(), "give SourceConfig.Declare")
	assert.False(t, resilience.IsTransient(err))

	cfg.Declare = &nats.StreamDeclaration{Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage}
	cfg.AckWait = 5 * time.Second
	cfg.MaxDeliver = 4
	src, err = nats.NewSource(cfg)
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	info := a.consumer(name, name)
	assert.Equal(t, 5*time.Second, info.Config.AckWait)
	assert.Equal(t, 4, info.Config.MaxDeliver)
	require.NoError(t, src.Open(ctx), "opens again on what it created")
	require.NoError(t, src.Close(ctx))

	for _, c := range []struct {
		field  string
		change func(*nats.SourceConfig)
	}{
		{"AckWait", func(c *nats.SourceConfig) { c.AckWait = time.Second }},
		{"MaxDeliver", func(c *nats.SourceConfig) { c.MaxDeliver = 0 }},
		{"BackOff", func(c *nats.SourceConfig) { c.BackOff = []time.Duration{time.Second} }},
		{"FilterSubject", func(c *nats.SourceConfig) { c.FilterSubject = name + ".x" }},
		{"Declare.Subjects", func(c *nats.SourceConfig) { c.Declare.Subjects = []string{name + ".other"} }},
	} {
		other := cfg
		d := *cfg.Declare
		other.Declare = &d
		c.change(&other)
		src, err := nats.NewSource(other)
		require.NoError(t, err, c.field)
		err = src.Open(ctx)
		var ce *nats.ConfigError
		require.ErrorAs(t, err, &ce, c.field)
		assert.Equal(t, c.field, ce.Field)
		assert.False(t, resilience.IsTransient(err))
	}
}

// A server that does not answer fails Open transiently, for node retry.
func TestOpenWithoutServerIsTransient(t *testing.T) {
	t.Parallel()
	src, err := nats.NewSource(nats.SourceConfig{URL: "nats://127.0.0.1:1", Stream: "s", Consumer: "c", DialTimeout: time.Second})
	require.NoError(t, err)
	err = src.Open(testContext(t))
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "nats: connect to nats://127.0.0.1:1: "), err.Error())
	assert.True(t, resilience.IsTransient(err))
}

// A connection error names the URL it tried, without its password, for
// the source and for the publishers.
func TestConnectErrorNamesTheURL(t *testing.T) {
	t.Parallel()
	const url = "nats://app:s3cret@127.0.0.1:1,nats://t0ken@127.0.0.1:2"
	src, err := nats.NewSource(nats.SourceConfig{URL: url, Stream: "s", Consumer: "c", DialTimeout: time.Second})
	require.NoError(t, err)
	err = src.Open(testContext(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nats://app:xxxxx@127.0.0.1:1,nats://xxxxx@127.0.0.1:2")
	assert.NotContains(t, err.Error(), "s3cret")
	assert.NotContains(t, err.Error(), "t0ken")

	dl, err := nats.NewDeadLetterPublisher(nats.DeadLetterConfig{URL: url, Subject: "dl", DialTimeout: time.Second})
	require.NoError(t, err)
	err = dl.Write(testContext(t), deadletter.Envelope{Item: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:1")
	assert.NotContains(t, err.Error(), "s3cret")
	require.NoError(t, dl.Close())
}
