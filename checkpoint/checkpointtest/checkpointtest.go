// Package checkpointtest is the conformance suite of [checkpoint.Store]:
// every store Sluice provides passes it, and so should a store of your
// own.
//
//	func TestConformance(t *testing.T) {
//		checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
//			return mystore.Open(...)
//		}, checkpointtest.WithReopen(func(t *testing.T, s checkpoint.Store) checkpoint.Store {
//			// close s, and open a store on what it saved
//		}))
//	}
//
// Its concurrency cases are meant to run under the race detector.
package checkpointtest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// An Option adds cases to [Run].
type Option func(*config)

type config struct {
	reopen func(t *testing.T, s checkpoint.Store) checkpoint.Store
}

// WithReopen runs the cases that need a store to be opened again on what
// another one saved, as a process does after a crash or a redeploy. reopen
// releases s as the store requires (closing a file, say) and returns a new
// store on the same storage (the same file, the same table). Without it,
// those cases are skipped: a store that keeps nothing across processes,
// like [checkpoint.Memory], has nothing to show there.
func WithReopen(reopen func(t *testing.T, s checkpoint.Store) checkpoint.Store) Option {
	return func(c *config) { c.reopen = reopen }
}

// Run checks the stores that newStore makes against the contract of
// [checkpoint.Store]. It runs its cases as parallel subtests, each with a
// store of its own that newStore makes with the subtest's t (so that
// t.Cleanup can drop what it created); newStore must be safe to call from
// several goroutines, and each store it returns must start empty. A store
// whose positions outlive the test (a table in a server) should use names
// that no other test uses at the same time.
func Run(t *testing.T, newStore func(t *testing.T) checkpoint.Store, opts ...Option) {
	t.Helper()
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.reopens && cfg.reopen == nil {
				t.Skip("the store cannot be opened again: no WithReopen")
			}
			c.run(t, &suite{store: newStore(t), reopen: cfg.reopen})
		})
	}
}

// suite is what a case works on: the store, and the way to open it again.
type suite struct {
	store  checkpoint.Store
	reopen func(t *testing.T, s checkpoint.Store) checkpoint.Store
}

// A suite case checks one clause of the contract.
type suiteCase struct {
	name    string
	reopens bool
	run     func(t *testing.T, s *suite)
}

var cases = []suiteCase{
	{name: "UnknownPairIsNil", run: unknownPairIsNil},
	{name: "SaveThenLoad", run: saveThenLoad},
	{name: "SaveReplaces", run: saveReplaces},
	{name: "PairsAreIndependent", run: pairsAreIndependent},
	{name: "EmptyPosition", run: emptyPosition},
	{name: "LargePosition", run: largePosition},
	{name: "BinaryPosition", run: binaryPosition},
	{name: "OddNames", run: oddNames},
	{name: "NamesNotUTF8AreKeptOrRefused", run: namesNotUTF8},
	{name: "SaveKeepsACopy", run: saveKeepsACopy},
	{name: "LoadReturnsACopy", run: loadReturnsACopy},
	{name: "ConcurrentSavesOfManyPairs", run: concurrentSavesOfManyPairs},
	{name: "ConcurrentSavesOfOnePair", run: concurrentSavesOfOnePair},
	{name: "CancelledContext", run: cancelledContext},
	{name: "ReopenSeesTheSavedPositions", reopens: true, run: reopenSeesTheSavedPositions},
	{name: "ReopenAfterConcurrentSaves", reopens: true, run: reopenAfterConcurrentSaves},
}

// LargePositionSize is the size of the largest position the suite saves:
// every store must keep positions this large.
const LargePositionSize = 1 << 20

func load(t *testing.T, s checkpoint.Store, pipeline, source string) []byte {
	t.Helper()
	p, err := s.Load(context.Background(), pipeline, source)
	require.NoError(t, err, "Load(%q, %q)", pipeline, source)
	return p
}

func save(t *testing.T, s checkpoint.Store, pipeline, source string, pos []byte) {
	t.Helper()
	require.NoError(t, s.Save(context.Background(), pipeline, source, pos), "Save(%q, %q)", pipeline, source)
}

// assertPos checks that the store holds want for the pair: a saved
// position, never nil, with the same bytes.
func assertPos(t *testing.T, s checkpoint.Store, pipeline, source string, want []byte, msg string) {
	t.Helper()
	got := load(t, s, pipeline, source)
	if !assert.NotNil(t, got, "%s: Load(%q, %q) is nil: nothing saved", msg, pipeline, source) {
		return
	}
	if !bytes.Equal(got, want) {
		assert.Fail(t, fmt.Sprintf("%s: Load(%q, %q) returned %s, want %s", msg, pipeline, source, show(got), show(want)))
	}
}

// show prints a position, or its length and ends when it is long.
func show(p []byte) string {
	if len(p) <= 64 {
		return fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf("%d bytes %q...%q", len(p), p[:16], p[len(p)-16:])
}

func unknownPairIsNil(t *testing.T, s *suite) {
	assert.Nil(t, load(t, s.store, "orders", "read"), "a store starts empty")
	save(t, s.store, "orders", "read", []byte("42"))
	assert.Nil(t, load(t, s.store, "orders", "other"), "another source")
	assert.Nil(t, load(t, s.store, "other", "read"), "another pipeline")
	assert.Nil(t, load(t, s.store, "", ""), "empty names")
}

func saveThenLoad(t *testing.T, s *suite) {
	save(t, s.store, "orders", "read", []byte("offset=1024"))
	assertPos(t, s.store, "orders", "read", []byte("offset=1024"), "after Save")
	assertPos(t, s.store, "orders", "read", []byte("offset=1024"), "Load again")
}

func saveReplaces(t *testing.T, s *suite) {
	for i := range 5 {
		pos := []byte(fmt.Sprint("offset=", i*1000))
		save(t, s.store, "orders", "read", pos)
		assertPos(t, s.store, "orders", "read", pos, fmt.Sprint("save ", i))
	}
	save(t, s.store, "orders", "read", []byte("a much longer position than the one before"))
	save(t, s.store, "orders", "read", []byte("short"))
	assertPos(t, s.store, "orders", "read", []byte("short"), "a shorter position replaces a longer one whole")
	save(t, s.store, "orders", "read", []byte("short"))
	assertPos(t, s.store, "orders", "read", []byte("short"), "the same position again")
	save(t, s.store, "orders", "read", []byte("offset=0"))
	assertPos(t, s.store, "orders", "read", []byte("offset=0"), "positions may go back: the store does not compare them")
}

func pairsAreIndependent(t *testing.T, s *suite) {
	// The same source name in two pipelines, two sources of one pipeline,
	// and names whose concatenations are equal.
	pairs := [][2]string{
		{"orders", "read"}, {"invoices", "read"}, {"orders", "refunds"},
		{"a", "bc"}, {"ab", "c"}, {"a/b", "c"}, {"a", "b/c"}, {"a:b", "c"}, {"a", "b:c"},
		{"", "x"}, {"x", ""},
	}
	// A store that keys on the two names joined by a separator of its own
	// mixes up such pairs: try the usual separators, one and two long.
	for _, sep := range []string{"|", ".", "-", "_", " ", ",", ";", "#", "@", "+", "=", "\t", "\n", "\x1f", "::", "//", "||", "--", "__", "\\"} {
		pairs = append(pairs, [2]string{"a" + sep + "b", "c"}, [2]string{"a", "b" + sep + "c"})
	}
	for i, p := range pairs {
		save(t, s.store, p[0], p[1], []byte(fmt.Sprint("pos-", i)))
	}
	for i, p := range pairs {
		assertPos(t, s.store, p[0], p[1], []byte(fmt.Sprint("pos-", i)), "each pair its own")
	}
	save(t, s.store, "orders", "read", []byte("moved"))
	assertPos(t, s.store, "invoices", "read", []byte("pos-1"), "a Save changes its pair only")
	assertPos(t, s.store, "orders", "refunds", []byte("pos-2"), "a Save changes its pair only")
}

func emptyPosition(t *testing.T, s *suite) {
	save(t, s.store, "orders", "read", []byte{})
	assertPos(t, s.store, "orders", "read", []byte{}, "an empty position is a position")
	save(t, s.store, "orders", "read", []byte("x"))
	save(t, s.store, "orders", "read", nil)
	assertPos(t, s.store, "orders", "read", []byte{}, "nil saves an empty position")
	assert.Nil(t, load(t, s.store, "orders", "other"), "nothing saved is still nil")
}

// largePos returns a position of n bytes that differ from one place to
// the next, marked by seed.
func largePos(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7+i>>8) ^ seed
	}
	return p
}

func largePosition(t *testing.T, s *suite) {
	big := largePos(LargePositionSize, 1)
	save(t, s.store, "orders", "read", big)
	assertPos(t, s.store, "orders", "read", big, "1 MiB")
	bigger := largePos(LargePositionSize, 2)
	save(t, s.store, "orders", "read", bigger)
	assertPos(t, s.store, "orders", "read", bigger, "replaced by another 1 MiB")
	save(t, s.store, "orders", "read", []byte("small"))
	assertPos(t, s.store, "orders", "read", []byte("small"), "then by a small one")
}

// binary returns every byte value, a NUL, bytes that are not UTF-8, and
// ends that a text encoding could strip.
func binary() []byte {
	p := []byte{0, 0, '\n', ' ', 0xff, 0xfe, '\r', '\t'}
	for b := range 256 {
		p = append(p, byte(b))
	}
	return append(p, ' ', '\n', 0, 0xc3)
}

func binaryPosition(t *testing.T, s *suite) {
	save(t, s.store, "orders", "read", binary())
	assertPos(t, s.store, "orders", "read", binary(), "every byte value")
	save(t, s.store, "orders", "nul", []byte{0})
	assertPos(t, s.store, "orders", "nul", []byte{0}, "a lone NUL")
	save(t, s.store, "orders", "space", []byte("  "))
	assertPos(t, s.store, "orders", "space", []byte("  "), "spaces are kept")
}

// oddNameList returns UTF-8 names that a store must keep apart and as they
// are: unicode, quotes and SQL, separators, long names that differ only
// in their last byte.
func oddNameList() []string {
	long := strings.Repeat("é-源-", 100) // 900 bytes
	return []string{
		"clé-🔑-ключ-鍵",
		`it's "quoted"`,
		`'; DROP TABLE sluice_checkpoints; --`,
		"glob*?[a-z]{}\\%_",
		"spaces and\ttabs\nand lines",
		" padded ",
		"<html>&amp;",
		"\u2028\ufeff",
		long + "a",
		long + "b",
	}
}

func oddNames(t *testing.T, s *suite) {
	names := oddNameList()
	for i, n := range names {
		save(t, s.store, n, "read", []byte(fmt.Sprint("pipeline-", i)))
		save(t, s.store, "orders", n, []byte(fmt.Sprint("source-", i)))
	}
	for i, n := range names {
		assertPos(t, s.store, n, "read", []byte(fmt.Sprint("pipeline-", i)), fmt.Sprintf("pipeline name %d", i))
		assertPos(t, s.store, "orders", n, []byte(fmt.Sprint("source-", i)), fmt.Sprintf("source name %d", i))
	}
}

func namesNotUTF8(t *testing.T, s *suite) {
	for i, n := range []string{"\xff\xfe not utf-8", "nul\x00byte"} {
		err := s.store.Save(context.Background(), n, "read", []byte("bad"))
		if err != nil {
			assert.Nil(t, load(t, s.store, n, "read"), "name %d: a refused name keeps nothing", i)
		} else {
			assertPos(t, s.store, n, "read", []byte("bad"), fmt.Sprintf("name %d: kept as it is", i))
		}
		// What a store that changes names would make of them.
		for _, changed := range []string{strings.ToValidUTF8(n, "\ufffd"), strings.ReplaceAll(n, "\x00", ""), "nul"} {
			if changed != n {
				assert.Nil(t, load(t, s.store, changed, "read"), "name %d: not kept as %q", i, changed)
			}
		}
	}
}

func saveKeepsACopy(t *testing.T, s *suite) {
	pos := []byte("offset=100")
	save(t, s.store, "orders", "read", pos)
	copy(pos, "XXXXXXXXXX")
	assertPos(t, s.store, "orders", "read", []byte("offset=100"), "the caller changed its slice after Save")
}

func loadReturnsACopy(t *testing.T, s *suite) {
	save(t, s.store, "orders", "read", []byte("offset=100"))
	got := load(t, s.store, "orders", "read")
	require.NotNil(t, got)
	copy(got, "XXXXXXXXXX")
	assertPos(t, s.store, "orders", "read", []byte("offset=100"), "the caller changed the slice Load returned")
}

// Under concurrent use, each of many goroutines saves a pair of its own
// again and again, and loads it back between saves.
func concurrentSavesOfManyPairs(t *testing.T, s *suite) {
	const pairs, saves = 32, 10
	saveMany(t, s.store, pairs, saves)
	for i := range pairs {
		assertPos(t, s.store, "concurrent", fmt.Sprint("source-", i), manyPos(i, saves-1), fmt.Sprint("pair ", i))
	}
}

func manyPos(i, n int) []byte { return []byte(fmt.Sprintf("source-%d-save-%d", i, n)) }

// saveMany has pairs goroutines save saves positions each, and checks each
// one loads back its last.
func saveMany(t *testing.T, s checkpoint.Store, pairs, saves int) {
	t.Helper()
	errs := make([]error, pairs)
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Go(func() {
			ctx, source := context.Background(), fmt.Sprint("source-", i)
			for n := range saves {
				if err := s.Save(ctx, "concurrent", source, manyPos(i, n)); err != nil {
					errs[i] = err
					return
				}
				got, err := s.Load(ctx, "concurrent", source)
				if err == nil && !bytes.Equal(got, manyPos(i, n)) {
					err = fmt.Errorf("loaded %q after saving %q", got, manyPos(i, n))
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "pair %d", i)
	}
}

// Many goroutines save one pair at once: what loads after is one of their
// positions, whole; loads meanwhile see only saved positions.
func concurrentSavesOfOnePair(t *testing.T, s *suite) {
	const savers = 16
	saved := map[string]bool{"initial": true}
	for i := range savers {
		saved[fmt.Sprint("saver-", i, "-", strings.Repeat("x", i*100))] = true
	}
	save(t, s.store, "orders", "read", []byte("initial"))
	errs := make([]error, savers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range savers {
		wg.Go(func() {
			<-start
			ctx := context.Background()
			if errs[i] = s.store.Save(ctx, "orders", "read", []byte(fmt.Sprint("saver-", i, "-", strings.Repeat("x", i*100)))); errs[i] != nil {
				return
			}
			got, err := s.store.Load(ctx, "orders", "read")
			if err == nil && !saved[string(got)] {
				err = fmt.Errorf("loaded %s, which nobody saved", show(got))
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "saver %d", i)
	}
	got := load(t, s.store, "orders", "read")
	assert.True(t, saved[string(got)] && string(got) != "initial", "the pair holds one saver's position, not %s", show(got))
}

func cancelledContext(t *testing.T, s *suite) {
	save(t, s.store, "orders", "read", []byte("before"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.store.Save(ctx, "orders", "read", []byte("after"))
	assert.ErrorIs(t, err, context.Canceled, "Save")
	err = s.store.Save(ctx, "orders", "new", []byte("after"))
	assert.ErrorIs(t, err, context.Canceled, "Save of a new pair")
	_, err = s.store.Load(ctx, "orders", "read")
	assert.ErrorIs(t, err, context.Canceled, "Load")
	assertPos(t, s.store, "orders", "read", []byte("before"), "a Save whose context was done changed nothing")
	assert.Nil(t, load(t, s.store, "orders", "new"), "nor made a pair")
}

func reopenSeesTheSavedPositions(t *testing.T, s *suite) {
	big := largePos(LargePositionSize, 3)
	save(t, s.store, "orders", "read", []byte("replaced"))
	save(t, s.store, "orders", "read", []byte("offset=7"))
	save(t, s.store, "invoices", "read", []byte{})
	save(t, s.store, "orders", "big", big)
	save(t, s.store, "orders", "binary", binary())
	name := oddNameList()[0]
	save(t, s.store, name, name, []byte(name))

	reopened := s.reopen(t, s.store)
	assertPos(t, reopened, "orders", "read", []byte("offset=7"), "after reopening")
	assertPos(t, reopened, "invoices", "read", []byte{}, "an empty position, after reopening")
	assertPos(t, reopened, "orders", "big", big, "1 MiB, after reopening")
	assertPos(t, reopened, "orders", "binary", binary(), "every byte value, after reopening")
	assertPos(t, reopened, name, name, []byte(name), "unicode names, after reopening")
	assert.Nil(t, load(t, reopened, "orders", "never"), "nothing saved, after reopening")

	save(t, reopened, "orders", "read", []byte("offset=8"))
	again := s.reopen(t, reopened)
	assertPos(t, again, "orders", "read", []byte("offset=8"), "a Save after reopening, reopened")
	assertPos(t, again, "orders", "big", big, "the other pairs stay")
}

func reopenAfterConcurrentSaves(t *testing.T, s *suite) {
	const pairs, saves = 16, 5
	saveMany(t, s.store, pairs, saves)
	reopened := s.reopen(t, s.store)
	for i := range pairs {
		assertPos(t, reopened, "concurrent", fmt.Sprint("source-", i), manyPos(i, saves-1), fmt.Sprint("pair ", i, ", after reopening"))
	}
}
