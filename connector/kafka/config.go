package kafka

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"
)

// Defaults of the settings left at zero.
const (
	// DefaultCommitInterval is how often a source commits the offsets of
	// the records that settled.
	DefaultCommitInterval = time.Second
	// DefaultRevokeTimeout bounds how long a source whose partitions are
	// revoked waits for their records in flight to settle before it
	// commits and lets the partitions go.
	DefaultRevokeTimeout = 10 * time.Second
	// DefaultMaxInFlight is the most records one source holds polled and
	// not settled.
	DefaultMaxInFlight = 256
	// DefaultSessionTimeout is how long the group coordinator waits for a
	// member's heartbeat before it gives the member's partitions to
	// others.
	DefaultSessionTimeout = 45 * time.Second
	// DefaultDialTimeout bounds connecting to one broker.
	DefaultDialTimeout = 10 * time.Second
	// DefaultCloseTimeout bounds the last commit at Close, and leaving
	// the group after it.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultDrainTimeout bounds a source's wait for its items in flight
	// after Stop.
	DefaultDrainTimeout = 30 * time.Second
)

// A SourceConfig configures a [Source]. Brokers, Topic and Group are
// required; every other zero value takes the default named in its
// comment.
type SourceConfig struct {
	// Brokers are the host:port addresses the client starts from; it
	// learns the rest of the cluster from them. Required.
	Brokers []string
	// Topic is the topic to consume. Required.
	Topic string
	// Group is the consumer group: every source with the same Group
	// shares the topic's partitions, and the group's committed offsets
	// are where a source starts. Required.
	Group string
	// Clock is what the connector's own waits use (the commit interval,
	// the revoke and drain bounds); default the real clock.
	Clock clockwork.Clock
	// CommitInterval is how often, on Clock, the source commits the
	// offsets of what settled. It also commits on drain, at Close and
	// when partitions are revoked. Default [DefaultCommitInterval].
	CommitInterval time.Duration
	// CommitEvery is how many records settled since the last commit make
	// the source commit at once, before CommitInterval is up, so that a
	// busy source commits often enough to keep polling (see MaxInFlight).
	// Default half of MaxInFlight.
	CommitEvery int
	// RevokeTimeout bounds, on Clock, how long a source whose partitions
	// are revoked waits for their records in flight to settle before it
	// commits what settled and lets the partitions go. A record that
	// settles later is not committed: the partition's next owner reads it
	// again (see docs/kafka.md, "Rebalances"). Then it waits too, at most
	// a copy's wait for its ack (10s), for the copies of their records
	// under way (to a tier with Retry; to the topic itself or the
	// dead-letter sink with MaxDeliveries), so that a stored copy's record
	// is committed. It must stay below the group's rebalance timeout
	// (60s), with those 10s when Retry or MaxDeliveries is set. Default
	// [DefaultRevokeTimeout].
	RevokeTimeout time.Duration
	// MaxInFlight is the most records the source holds polled and not
	// settled, with those settled and not yet committed that the next
	// commit covers: it polls for more only when it has room. So a
	// process that dies leaves at most MaxInFlight records done and not
	// committed, besides the records behind one still in flight in its
	// partition (see docs/kafka.md, "Offsets"). Default
	// [DefaultMaxInFlight].
	MaxInFlight int
	// MaxPollRecords, when positive, is the most records one poll takes,
	// within the room MaxInFlight leaves: with [Source.Batches], the most
	// records of a batch, so that a deep MaxInFlight does not make batches
	// that a failure retries whole. 0 takes what the room allows.
	MaxPollRecords int
	// StartAtEnd makes a group that has no committed offset for a
	// partition start at the partition's end (only records produced from
	// then on); by default it starts at the earliest offset.
	StartAtEnd bool
	// Dial, when not nil, opens every connection to a broker in place of
	// a net.Dialer: a proxy, TLS, or a test's fault injection.
	Dial func(ctx context.Context, network, host string) (net.Conn, error)
	// SessionTimeout is how long the group coordinator waits for a
	// heartbeat of the source before it gives the source's partitions to
	// other members: how long the partitions of a process that died wait.
	// The source sends a heartbeat every third of it, at most every 3 s.
	// It must be within the brokers' group.min.session.timeout.ms and
	// group.max.session.timeout.ms (6 s and 30 min by default). Default
	// [DefaultSessionTimeout].
	SessionTimeout time.Duration
	// DialTimeout bounds connecting to one broker, and Open's first
	// request to the cluster (which checks the topic). Default
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// DrainTimeout bounds how long Close waits, after [Source.Stop], for
	// the items in flight to settle so that their offsets are committed.
	// Default [DefaultDrainTimeout].
	DrainTimeout time.Duration
	// CloseTimeout bounds the last commit at Close, and then, once
	// more, leaving the group (and, with Retry or MaxDeliveries, once
	// more the copies' flush). A client whose leave got no answer in
	// time closes in the background. Default [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// MaxDeliveries, when positive, is the poison guard: a record whose
	// items failed this many runs (their outcome was node.Rejected: a
	// node's failure action said Fail and the run failed because of it)
	// is not emitted again; the source writes it to the pipeline's
	// dead-letter sink, with an error matching [ErrPoison] and the
	// envelope telling each failed run, and commits past it. The count is
	// carried in the record: after a failed run the source produces a
	// copy that counts it (see [HeaderFailures]) to the end of the
	// record's partition and commits past the original, so it holds
	// across processes; reads that ended otherwise (the run ended first,
	// a broker retry, a hand-off, a crash) count nothing. It needs the
	// pipeline's dead-letter sink (pipeline.WithDeadLetter): Open fails
	// without one. See docs/kafka.md ("Poison records"). 0 sets no limit.
	MaxDeliveries int
	// CrashLedger, when not empty, is the path of a file in which the
	// source keeps the records it has in flight, so that a record whose
	// processing ends the consumer's process (os.Exit, an unrecovered
	// panic in a goroutine, an OOM kill) is caught: after a crash, each
	// record that was in flight runs alone when it is read again (for at
	// most CrashAloneWait), and a record that crashes the process while it
	// runs alone is, at its next read, written to the pipeline's
	// dead-letter sink with an error matching [ErrCrashed] (and
	// [ErrPoison]) and committed past, without running. Its neighbours
	// are never dead-lettered. It needs the pipeline's dead-letter sink:
	// Open fails without one. Each consumer process needs a path of its
	// own; a restarted process must get the same path. See docs/kafka.md
	// ("Records that crash the consumer"). "" keeps no ledger.
	CrashLedger string
	// CrashAloneWait bounds, on Clock, how long a suspect of a crash
	// waits for nothing else of the source to be in flight, and how long
	// it then runs alone, so that a pipeline which holds items until more
	// arrive never stalls. Only with CrashLedger. Default
	// [DefaultCrashAloneWait].
	CrashAloneWait time.Duration
	// Retry is the broker's layer: retry topics ("<topic>.retry.<delay>")
	// that a record waits in, consumed by the source in the same group,
	// for hand-offs and the DeadLetter sink's broker retries. See
	// [RetryTopics] and docs/kafka.md ("Retry topics"). The zero value is
	// off.
	Retry RetryTopics
}

// maxTopicName is the longest topic name Kafka takes.
const maxTopicName = 249

// Validate reports every problem of c, joined, each a [*ConfigError].
func (c SourceConfig) Validate() error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	validateBrokers(c.Brokers, add)
	validateTopic("Topic", c.Topic, add)
	if c.Group == "" {
		add("Group", `""`, "required: the consumer group's name")
	}
	if c.CommitEvery < 0 {
		add("CommitEvery", c.CommitEvery, "must not be negative; 0 takes the default")
	}
	if c.MaxInFlight < 0 {
		add("MaxInFlight", c.MaxInFlight, "must not be negative; 0 takes the default")
	}
	if c.MaxPollRecords < 0 {
		add("MaxPollRecords", c.MaxPollRecords, "must not be negative; 0 takes what MaxInFlight leaves room for")
	}
	if c.SessionTimeout != 0 && c.SessionTimeout < time.Second {
		add("SessionTimeout", c.SessionTimeout, "must be at least 1s")
	}
	if c.RevokeTimeout >= 60*time.Second {
		add("RevokeTimeout", c.RevokeTimeout, "must be below the group's rebalance timeout (1m0s), or the group drops the source while it waits")
	}
	if c.CommitInterval != 0 && c.CommitInterval < time.Millisecond {
		add("CommitInterval", c.CommitInterval, "must be at least 1ms")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"CommitInterval", c.CommitInterval}, {"RevokeTimeout", c.RevokeTimeout}, {"SessionTimeout", c.SessionTimeout},
		{"DialTimeout", c.DialTimeout}, {"DrainTimeout", c.DrainTimeout}, {"CloseTimeout", c.CloseTimeout}} {
		if f.d < 0 {
			add(f.name, f.d, "must not be negative")
		}
	}
	errs = append(errs, guardProblems(c)...)
	return errors.Join(errs...)
}

// validateBrokers checks a list of broker addresses.
func validateBrokers(brokers []string, add func(field string, value any, reason string)) {
	if len(brokers) == 0 {
		add("Brokers", "[]", "required: at least one broker's host:port")
		return
	}
	for i, b := range brokers {
		host, port, err := net.SplitHostPort(b)
		field := "Brokers[" + strconv.Itoa(i) + "]"
		switch {
		case err != nil:
			add(field, strconv.Quote(b), "not a host:port address")
		case host == "":
			add(field, strconv.Quote(b), "names no host")
		default:
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				add(field, strconv.Quote(b), "the port must be a number from 1 to 65535")
			}
		}
	}
}

// validateTopic checks a topic name as Kafka does: 1 to 249 of ASCII
// letters, digits, '.', '_' and '-', and neither "." nor "..".
func validateTopic(field, topic string, add func(field string, value any, reason string)) {
	switch {
	case topic == "":
		add(field, `""`, "required")
	case len(topic) > maxTopicName:
		add(field, topic, "longer than Kafka's 249 characters")
	case topic == "." || topic == "..":
		add(field, topic, `Kafka refuses "." and ".." as topic names`)
	default:
		for _, r := range topic {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				add(field, topic, "may hold only ASCII letters, digits, '.', '_' and '-'")
				return
			}
		}
	}
}

// withDefaults returns c with every zero setting at its default.
func (c SourceConfig) withDefaults() SourceConfig {
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.RevokeTimeout == 0 {
		c.RevokeTimeout = DefaultRevokeTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.CommitEvery == 0 {
		c.CommitEvery = max(1, c.MaxInFlight/2)
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.CrashLedger != "" && c.CrashAloneWait == 0 {
		c.CrashAloneWait = DefaultCrashAloneWait
	}
	c.Retry.Delays = append([]time.Duration(nil), c.Retry.Delays...)
	c.Brokers = append([]string(nil), c.Brokers...)
	return c
}
