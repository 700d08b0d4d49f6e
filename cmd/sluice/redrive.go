package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
	"unicode"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
)

// A letter is one envelope to re-drive, with the key the ledger knows it
// by: the SHA-256 of its line, which names one dead letter (its item, its
// error and its times) wherever the line is copied to.
type letter struct {
	r   deadletter.Record
	key string
}

func letterKey(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// redrive publishes the items of dead letters to RabbitMQ, each once: the
// ledger records what was re-driven, so that a second redrive of the same
// files sends only what is new.
func redrive(args []string, stdout, stderr io.Writer) (code int) {
	fs := newFlagSet("redrive")
	var in input
	addInputFlags(fs, &in)
	url := fs.String("amqp", "", "the RabbitMQ `URL` to publish to, as amqp://user:pass@host:5672/vhost")
	queue := fs.String("queue", "", "publish to the queue `Q` (through the default exchange)")
	exchange := fs.String("exchange", "", "publish to the exchange `X` instead")
	key := fs.String("routing-key", "", "the routing `KEY` with --exchange")
	node := fs.String("node", "", "re-drive only envelopes whose origin or decision node is `X`")
	ledgerPath := fs.String("ledger", "", "the ledger `FILE` of what was re-driven (default: the first FILE + .redriven)")
	dryRun := fs.Bool("dry-run", false, "list what would be re-driven; publish nothing, write no ledger")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on a publish not confirmed within `D`")
	positional, code, ok := parse(fs, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(positional) == 0:
		return wrongArgs(stderr, "redrive", "FILE...", positional)
	case *url == "":
		return usageError(stderr, "dlq redrive: --amqp URL is required (--dry-run reads the ledger for that broker)")
	case (*queue == "") == (*exchange == ""):
		return usageError(stderr, "dlq redrive: give one of --queue Q and --exchange X")
	case *queue != "" && *key != "":
		return usageError(stderr, "dlq redrive: --routing-key goes with --exchange; --queue is the routing key")
	case *timeout <= 0:
		return usageError(stderr, fmt.Sprintf("dlq redrive: --timeout %s: must be positive", *timeout))
	}
	in.files = positional
	if *ledgerPath == "" {
		*ledgerPath = positional[0] + ".redriven"
	}
	target := fmt.Sprintf("queue %q", *queue)
	if *exchange != "" {
		target = fmt.Sprintf("exchange %q with routing key %q", *exchange, *key)
	}

	// The ledger knows a letter by the broker and the target it went to:
	// the same queue on another broker or vhost still gets it.
	broker, err := brokerOf(*url)
	if err != nil {
		return usageError(stderr, "dlq redrive: --amqp: "+err.Error())
	}
	where := broker + " " + target
	// Ctrl-C stops the redrive between two letters: the publish under
	// way is confirmed (or times out) and recorded first, so that what
	// the broker took is what the ledger and the count say. A second
	// Ctrl-C ends the process at once. Caught from before the ledger is
	// opened, so that one made and left empty is removed.
	interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	context.AfterFunc(interrupted, stop)
	paths, _ := in.paths(io.Discard)
	for _, path := range paths {
		if sameFile(*ledgerPath, path) {
			return usageError(stderr, fmt.Sprintf("dlq redrive: --ledger %s is the input %s", *ledgerPath, path))
		}
	}
	var ledger *ledgerFile
	if !*dryRun {
		// Held from the reading of the ledger to the last letter's line:
		// two redrives at once would each send what the other sends.
		if ledger, err = openLedger(*ledgerPath); err != nil {
			dataError(stderr, err)
			return exitData
		}
		defer func() {
			if err := ledger.close(); err != nil {
				dataError(stderr, err)
				code = exitData
			}
		}()
	}
	done, err := readLedger(*ledgerPath, ledger, where)
	if err != nil {
		dataError(stderr, err)
		return exitData
	}
	var todo []letter
	total, already, unencoded, duplicates := 0, 0, 0, 0
	seen := map[string]bool{} // the letters taken in this run
	type reading struct {
		code int
		read bool
	}
	// Read on a goroutine of its own, so that Ctrl-C ends a read that
	// blocks (an input that is a FIFO nobody writes, a stalled network
	// file): what it read is then dropped, nothing sent.
	readDone := make(chan reading, 1)
	go func() {
		c, _, r := in.each(stderr, func(r deadletter.Record) {
			if *node != "" && r.OriginNode != *node && r.DecisionNode != *node {
				return
			}
			total++
			k := letterKey(r.Raw)
			switch {
			case done[k]:
				already++
			case seen[k]:
				duplicates++ // a line copied twice is sent once
			case r.ItemError != "":
				// Nothing to send: the item was never encoded.
				unencoded++
				dataError(stderr, fmt.Errorf("%s:%d: not re-driven: the item was not encoded when it was dead-lettered: %s", r.Path, r.Line, oneLine(r.ItemError)))
			default:
				seen[k] = true
				if _, err := letterPublishing(letter{r, k}); err != nil {
					// No publish can carry it: it is left, and the letters
					// after it are sent, instead of stopping at it on
					// every run.
					unencoded++
					dataError(stderr, fmt.Errorf("%s:%d: not re-driven: %w", r.Path, r.Line, err))
					return
				}
				todo = append(todo, letter{r, k})
			}
		})
		readDone <- reading{c, r}
	}()
	var got reading
	select {
	case got = <-readDone:
	case <-interrupted.Done():
	}
	if interrupted.Err() != nil {
		dataError(stderr, errors.New("interrupted while reading the dead letters: nothing was sent"))
		return exitData
	}
	code = got.code
	if !got.read {
		return code
	}
	if unencoded > 0 {
		code = exitData
	}
	twice := 0 // letters perhaps sent twice
	counts := func(n int, verb string) string {
		line := fmt.Sprintf("%d of %d envelopes %s to %s; %d were already (ledger %s)", n, total, verb, target, already, *ledgerPath)
		if twice > 0 {
			line += fmt.Sprintf("; %d may have been sent twice (reported above)", twice)
		}
		if unencoded > 0 {
			line += fmt.Sprintf("; %d not re-driven (reported above)", unencoded)
		}
		if duplicates > 0 {
			line += fmt.Sprintf("; %d repeated a line read before", duplicates)
		}
		return line + "\n"
	}
	if *dryRun {
		ew := &errWriter{w: stdout}
		for _, l := range todo {
			ew.Write(fmt.Appendf(nil, "would re-drive %s:%d (%s) to %s\n", l.r.Path, l.r.Line, orDash(oneLine(l.r.OriginNode)), target))
		}
		ew.Write([]byte(counts(len(todo), "would be re-driven")))
		if ew.err != nil {
			dataError(stderr, fmt.Errorf("standard output: %w", ew.err))
			return exitData
		}
		return code
	}

	sent, err := publishLetters(interrupted, todo, *url, *exchange, cmpOr(*queue, *key), *timeout, ledger, where, func(l letter, id string) {
		twice++
		fmt.Fprintf(stderr, "sluice: %s:%d: may have been sent twice (message-id %q): the connection was lost before the broker confirmed the first publish, and a second was confirmed\n", l.r.Path, l.r.Line, id)
	})
	if _, werr := io.WriteString(stdout, counts(sent, "re-driven")); werr != nil {
		dataError(stderr, fmt.Errorf("standard output: %w", werr))
		code = exitData
	}
	if err != nil {
		dataError(stderr, err)
		return exitData
	}
	return code
}

// letterPublishing is the message a letter is re-driven as: its item as
// it was (a Message's own body, a []byte's bytes, else its JSON), with
// the redrive's headers. It refuses what AMQP cannot carry (a property or
// a header name over 255 bytes, a header value of a type it has not), so
// that such a letter is reported and left while reading, not met by the
// publish, which would stop the redrive there on every run.
func letterPublishing(l letter) (amqp.Publishing, error) {
	pub, err := rabbitmq.Republishing(l.r.Envelope)
	if err != nil {
		return pub, err
	}
	pub.MessageId = cmpOr(pub.MessageId, l.key)
	if pub.Headers == nil {
		pub.Headers = amqp.Table{}
	}
	pub.Headers["x-sluice-redrive-of"] = fmt.Sprintf("%s:%d", l.r.Path, l.r.Line)
	pub.Headers["x-sluice-redrive-node"] = l.r.DecisionNode
	pub.Headers["x-sluice-item-type"] = l.r.ItemType
	for _, f := range []struct{ name, v string }{
		{"content_type", pub.ContentType}, {"content_encoding", pub.ContentEncoding},
		{"correlation_id", pub.CorrelationId}, {"reply_to", pub.ReplyTo},
		{"expiration", pub.Expiration}, {"message_id", pub.MessageId},
		{"type", pub.Type}, {"user_id", pub.UserId}, {"app_id", pub.AppId},
	} {
		if len(f.v) > 255 {
			return pub, fmt.Errorf("its %s is %d bytes long, more than AMQP's 255", f.name, len(f.v))
		}
	}
	for k := range pub.Headers {
		if len(k) > 255 {
			return pub, fmt.Errorf("a header name is %d bytes long, more than AMQP's 255", len(k))
		}
	}
	if err := pub.Headers.Validate(); err != nil {
		return pub, fmt.Errorf("its headers: %w", err)
	}
	return pub, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// publishLetters publishes each letter's item with publisher confirms and
// records it in the ledger once the broker confirmed it. A crash between
// the confirm and the ledger's fsync sends that letter again next time:
// re-drive is at-least-once, as the handlers of re-driven items must
// allow (docs/dead-letters.md). When interrupted ends, it stops before
// the next letter; the publish under way is not cancelled by it, only
// bounded by the confirm timeout, so that a letter the broker took is
// counted and recorded.
//
// A letter whose first publish lost its connection before its confirm
// came, and whose retry was confirmed, is counted, recorded and passed to
// resent with its message ID: the broker may have it twice.
func publishLetters(interrupted context.Context, todo []letter, url, exchange, key string, timeout time.Duration, ledger *ledgerFile, target string, resent func(l letter, messageID string)) (sent int, err error) {
	if len(todo) == 0 {
		return 0, nil
	}
	ctx := context.WithoutCancel(interrupted)
	pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[letter]{
		URL: url, Exchange: exchange, RoutingKey: key,
		// An item no queue takes is an error, not a silent drop.
		Mandatory:  true,
		Confirms:   rabbitmq.Confirms{Enabled: true, WaitFor: true, Timeout: timeout},
		PubRetry:   rabbitmq.PubRetry{Enabled: true},
		Publishing: letterPublishing,
	})
	if err != nil {
		return 0, err
	}
	if err := pub.Open(interrupted); err != nil {
		if interrupted.Err() != nil {
			err = fmt.Errorf("interrupted while connecting: %w", err)
		}
		return 0, errors.Join(err, pub.Close(ctx))
	}
	defer func() { err = errors.Join(err, pub.Close(ctx)) }()
	for _, l := range todo {
		if interrupted.Err() != nil {
			return sent, errors.New("interrupted: the letters after this count were not sent")
		}
		before := pub.Resent()
		if err := pub.Write(ctx, l); err != nil {
			return sent, fmt.Errorf("%s:%d: %w", l.r.Path, l.r.Line, err)
		}
		if pub.Resent() != before {
			// Named before the ledger's write, which may fail.
			m, _ := letterPublishing(l)
			resent(l, m.MessageId)
		}
		if err := ledger.record(l, target); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

// The ledger: one line per letter re-driven, once its publish was
// confirmed: the letter's key, where it went (the broker's host and vhost,
// and the queue or exchange; spaces as %20), and where the letter was, for
// people. A letter re-driven to one place is not re-driven there again;
// another place still gets it.

// brokerOf names the broker of an AMQP URL for the ledger: host, port and
// vhost, without the credentials, canonical (canonicalHost), so that one
// broker written two ways is one.
func brokerOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return "", fmt.Errorf("%q is not an amqp:// or amqps:// URL", u.Redacted())
	}
	vhost := strings.TrimPrefix(u.Path, "/")
	if vhost == "" {
		vhost = "/"
	}
	return u.Scheme + "://" + canonicalHost(u.Scheme, u.Host) + " vhost " + vhost, nil
}

// canonicalHost is host[:port] of a URL of scheme as one name per
// broker: the host in lower case without a trailing dot, an IP address in
// its shortest form (an IPv4-mapped IPv6 one as IPv4), and the port as a
// number, 5672 (5671 for amqps) when none is given.
func canonicalHost(scheme, hostport string) string {
	u := url.URL{Host: hostport}
	host, port := strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), u.Port()
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	} else {
		port = "5672"
		if scheme == "amqps" {
			port = "5671"
		}
	}
	return net.JoinHostPort(host, port)
}

// ledgerTarget is target as one field of a ledger line: % and white space
// escaped as %XX, so that no two targets share a field.
func ledgerTarget(target string) string {
	var b strings.Builder
	for _, r := range target {
		if r == '%' || unicode.IsSpace(r) {
			for _, c := range []byte(string(r)) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// readLedger returns the keys that the ledger at path holds for target,
// the canonical name of a broker and a target; a missing ledger is empty.
// It reads f, the ledger opened and locked, when not nil. A torn last
// line, left by a crash, is ignored: its letter was not recorded.
//
// A line written before broker names were canonical names the broker as
// its URL wrote it (no port, a host in capitals), with only the spaces
// escaped: it is matched by the canonical form of its name. Not for a
// target with % in it: such a line's target was ambiguous (docs).
func readLedger(path string, f *ledgerFile, target string) (map[string]bool, error) {
	done := map[string]bool{}
	var r io.Reader
	if f != nil {
		r = io.NewSectionReader(f.f, 0, math.MaxInt64)
	} else {
		file, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return done, nil
		}
		if err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		defer file.Close()
		r = file
	}
	want := ledgerTarget(target)
	oldForm := !strings.Contains(target, "%")
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || len(fields[0]) != sha256.Size*2 {
			continue
		}
		if fields[1] == want || oldForm && canonicalOldTarget(fields[1]) == target {
			done[fields[0]] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ledger %s: %w", path, err)
	}
	return done, nil
}

// canonicalOldTarget returns the canonical name of a ledger line's target
// of the old form, "scheme://host vhost V target" with its spaces as
// %20; "" when field is not of that form.
func canonicalOldTarget(field string) string {
	if strings.Contains(strings.ReplaceAll(field, "%20", ""), "%") {
		return "" // not the old form: % was never escaped then
	}
	t := strings.ReplaceAll(field, "%20", " ")
	scheme, rest, ok := strings.Cut(t, "://")
	if !ok || (scheme != "amqp" && scheme != "amqps") {
		return ""
	}
	host, rest, ok := strings.Cut(rest, " vhost ")
	if !ok {
		return ""
	}
	return scheme + "://" + canonicalHost(scheme, host) + " vhost " + rest
}

// A ledgerFile is the ledger, open for appending and locked.
type ledgerFile struct {
	f       *os.File
	path    string
	created bool // the file did not exist before
}

// openLedger opens the ledger at path, creating it, and locks it; it
// first ends a torn last line (a crash in the middle of a write), so that
// the next line starts whole. Another redrive that holds it is an error,
// not a wait.
func openLedger(path string) (*ledgerFile, error) {
	for range 8 {
		l, again, err := tryOpenLedger(path)
		if !again {
			return l, err
		}
	}
	return nil, fmt.Errorf("ledger %s: it was removed and made again while it was opened, eight times", path)
}

// tryOpenLedger is openLedger once: again says the file at path was
// removed or replaced between its opening and its lock (a redrive that
// made it and sent nothing removed it), and should be opened anew.
func tryOpenLedger(path string) (l *ledgerFile, again bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	created := false
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
		created = err == nil
		if errors.Is(err, os.ErrExist) {
			if info, lerr := os.Lstat(path); lerr == nil && info.Mode()&os.ModeSymlink != 0 {
				if _, serr := os.Stat(path); errors.Is(serr, os.ErrNotExist) {
					return nil, false, fmt.Errorf("ledger %s: a symbolic link to a file that does not exist", path)
				}
			}
			return nil, true, nil // made meanwhile: open it
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("ledger: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, false, fmt.Errorf("ledger %s: another redrive is using it (%w); run one at a time per ledger", path, err)
		}
		return nil, false, fmt.Errorf("ledger %s: lock: %w", path, err)
	}
	held, herr := f.Stat()
	named, nerr := os.Stat(path)
	if herr != nil || nerr != nil || !os.SameFile(held, named) {
		f.Close()
		return nil, true, nil
	}
	if size := held.Size(); size > 0 {
		last := make([]byte, 1)
		if _, err = f.ReadAt(last, size-1); err == nil && last[0] != '\n' {
			_, err = f.Write([]byte{'\n'})
		}
	}
	if err == nil && created {
		// The new name is synced too: a crash must not take the ledger,
		// and every line synced into it, away with the directory entry.
		err = syncParent(path)
	}
	if err != nil {
		return nil, false, errors.Join(fmt.Errorf("ledger: %w", err), f.Close())
	}
	return &ledgerFile{f: f, path: path, created: created}, false, nil
}

// record appends l's line, for target, and syncs it. A ledger that was
// removed or replaced at its path meanwhile is an error: the lines would
// go to a file nobody reads.
func (l *ledgerFile) record(lt letter, target string) error {
	if !l.atPath() {
		return fmt.Errorf("ledger %s: it was removed or replaced during the redrive; the letters sent so far are recorded in no ledger", l.path)
	}
	if _, err := fmt.Fprintf(l.f, "%s %s %s:%d\n", lt.key, ledgerTarget(target), lt.r.Path, lt.r.Line); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// close closes the ledger. One this redrive made and wrote nothing to is
// removed first, while still locked, so that a redrive that sent nothing
// leaves no empty ledger behind; a redrive that opened it meanwhile finds
// it gone once it holds the lock, and makes it anew.
func (l *ledgerFile) close() error {
	var err error
	if l.created && l.atPath() {
		if info, serr := l.f.Stat(); serr == nil && info.Size() == 0 {
			err = os.Remove(l.path)
		}
	}
	return errors.Join(err, l.f.Close())
}

// atPath reports whether the ledger's path still names the file held.
func (l *ledgerFile) atPath() bool {
	held, herr := l.f.Stat()
	named, nerr := os.Stat(l.path)
	return herr == nil && nerr == nil && os.SameFile(held, named)
}
