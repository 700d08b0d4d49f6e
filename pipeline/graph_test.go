package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/graphdoc"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// shop is a small pipeline with one node of most kinds: two sources, a
// parallel transform with armed layers, a keyed one with a buffer of its
// own, a filter whose stream is broadcast to a route and a batch, a merge
// of the route's branches, a join of the merge with the second source, and
// two sinks.
func shop(t *testing.T, n int) (*pipeline.Pipeline, *pipelinetest.Collector[string]) {
	t.Helper()
	b := pipeline.New("shop", pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	read := pipeline.Source(b, "read", pipelinetest.NewSliceSource(ints(n)...))
	enriched := pipeline.Transform(b, "enrich", read, double(), pipeline.Parallel(8), pipeline.Unordered(),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 4
			o.CircuitBreaker.Enabled = true
			o.OnItemFailure = resilience.DeadLetter
		}))
	keyed := pipeline.Transform(b, "by-key", enriched, double(), pipeline.Keyed(4, func(x int) int { return x % 3 }),
		pipeline.Buffer(16))
	kept := pipeline.Filter(b, "even", keyed, func(x int) bool { return x%8 == 0 })
	branches := pipeline.Route(b, "split", kept, 2, func(x int) int { return x / 8 % 2 })
	merged := pipeline.Merge(b, "merge", branches[0], branches[1])
	pipeline.Sink(b, "archive", pipeline.Batch(b, "batch", kept, 10, 0), &pipelinetest.Collector[[]int]{})
	prices := pipeline.Source(b, "prices", pipelinetest.NewSliceSource(ints(n)...))
	joined := pipeline.Join(b, "pair", merged, prices, func(x int) int { return x }, func(p int) int { return p },
		time.Hour, func(x, p int) string { return fmt.Sprint(x, "@", p) })
	col := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", joined, col)
	return build(t, b), col
}

func TestGraphNodesAndEdges(t *testing.T) {
	t.Parallel()
	p, _ := shop(t, 1)
	g := p.Graph()
	assert.Equal(t, "shop", g.Pipeline)
	assert.Equal(t, pipeline.DefaultHandOverBatch, g.HandOver)

	var names []string
	for _, n := range g.Nodes {
		names = append(names, n.Name)
	}
	assert.Equal(t, []string{"read", "enrich", "by-key", "even", "split", "split[0]", "split[1]", "merge",
		"batch", "archive", "prices", "pair/left", "pair/right", "pair/in", "pair", "store"}, names,
		"nodes in the order they were added")

	type edge struct {
		from, to  string
		buffer    int
		broadcast bool
	}
	var edges []edge
	for _, e := range g.Edges {
		edges = append(edges, edge{g.Nodes[e.From].Name, g.Nodes[e.To].Name, e.Buffer, e.Broadcast})
	}
	assert.ElementsMatch(t, []edge{
		{"read", "enrich", 64, false},
		{"enrich", "by-key", 16, false}, // the node's own Buffer
		{"by-key", "even", 64, false},
		{"even", "split", 64, true}, // one stream, two consumers
		{"even", "batch", 64, true},
		{"split", "split[0]", 64, false}, // a route is no broadcast
		{"split", "split[1]", 64, false},
		{"split[0]", "merge", 64, false},
		{"split[1]", "merge", 64, false},
		{"batch", "archive", 64, false},
		{"merge", "pair/left", 64, false},
		{"prices", "pair/right", 64, false},
		{"pair/left", "pair/in", 64, false},
		{"pair/right", "pair/in", 64, false},
		{"pair/in", "pair", 64, false},
		{"pair", "store", 64, false},
	}, edges)

	enrich := g.Nodes[1]
	assert.Equal(t, 8, enrich.Parallel)
	assert.True(t, enrich.Unordered)
	assert.Equal(t, []string{"retry 4", "node retry 3", "breaker", "dead letter"}, enrich.Layers)
	byKey := g.Nodes[2]
	assert.True(t, byKey.Keyed)
	assert.Equal(t, 4, byKey.Parallel)
	assert.Empty(t, g.Nodes[7].Layers, "a merge calls nothing that fails: no layer can act")

	m := g.Mermaid()
	for _, line := range []string{
		`    n0_read(["read<br>source · node retry 3"]):::source`,
		`    n1_enrich["enrich<br>transform · ×8 unordered · retry 4, node retry 3, breaker, dead letter"]:::work`,
		`    n2_by_key["by-key<br>transform · keyed ×4 · retry 3, node retry 3"]:::work`,
		`    n3_even["even<br>filter"]:::work`,
		`    n4_split{{"split<br>route"}}:::structure`,
		`    n5_split_0("split[0]<br>branch"):::structure`,
		`    n9_archive[("archive<br>sink · retry 3, node retry 3")]:::sink`,
		`    n11_pair_left["pair/left<br>transform"]:::work`, // the join's own tagging, which never fails
		`    n14_pair["pair<br>join"]:::work`,
		`    n1_enrich -->|"16"| n2_by_key`,
		`    n3_even -->|"64 · broadcast"| n4_split`,
		`    n3_even -->|"64 · broadcast"| n8_batch`,
		`    n4_split -->|"64"| n5_split_0`,
	} {
		assert.Contains(t, m, line+"\n")
	}
	checkMermaid(t, g)
	checkDOT(t, g)
	assert.Contains(t, g.DOT(), `    n1_enrich [label="enrich\ntransform · ×8 unordered · retry 4, node retry 3, breaker, dead letter", fillcolor="#fff8e1", style=filled];`)
	assert.Equal(t, m, p.Graph().Mermaid(), "rendering is deterministic")
	assert.Equal(t, g.DOT(), p.Graph().DOT())
}

// Layers that are off by default show only where set.
func TestGraphLayers(t *testing.T) {
	t.Parallel()
	b := pipeline.New("layers", pipeline.WithDeadLetter(deadletter.NewMemory(1)), pipeline.WithProfile(resilience.ProfileHighThroughput))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1), pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 2
	}))
	tr := pipeline.Map(b, "call", src, double().Process, pipeline.RateLimit(100, 1),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.AttemptTimeout = 2 * time.Second
			o.ItemRetry.MaxRetries = 2
			o.RetryBudget = resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1})
			o.FailureRules = []resilience.FailureRule{{Match: func(error) bool { return false }, Action: resilience.Skip}}
		}),
		pipeline.Fallback(func(_ context.Context, x int, _ error) (int, error) { return x, nil }))
	kept := pipeline.Filter(b, "keep", tr, func(int) bool { return true }, pipeline.NodeResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
	}))
	pipeline.Sink(b, "store", kept, &pipelinetest.Collector[int]{})
	g := build(t, b).Graph()
	assert.Equal(t, []string{"restart 2"}, g.Nodes[0].Layers)
	assert.Equal(t, []string{"retry 2 (budget)", "timeout 2s", "rate 100/s", "fallback", "skip"}, g.Nodes[1].Layers)
	assert.Equal(t, []string{"dead letter"}, g.Nodes[2].Layers)
	assert.Empty(t, g.Nodes[3].Layers, "the high-throughput profile retries nothing")
	assert.Equal(t, pipeline.HighThroughputHandOverBatch, g.HandOver)
	assert.Equal(t, pipeline.HighThroughputBuffer, g.Edges[0].Buffer)
}

// Names with characters that Mermaid or DOT would read render as written.
func TestGraphEscapesNames(t *testing.T) {
	t.Parallel()
	names := []string{
		`say "hi"`, "a[0]", "<b>bold</b>", "x|y", "two\nlines", "tab\there", `back\slash`, "#35; & #quot;",
		"`code`", "{curly}", "semi;colon", "%% not a comment", "end", "a --> b", "crème brûlée ☕",
		"(round)", "o--o", "",
	}
	names[len(names)-1] = "-- \"q\" -->|x| n0"
	b := pipeline.New(`the "odd" names` + "\n")
	s := pipeline.Source(b, names[0], pipelinetest.NewSliceSource(1))
	for _, name := range names[1 : len(names)-1] {
		s = pipeline.Transform(b, name, s, double())
	}
	pipeline.Sink(b, names[len(names)-1], s, &pipelinetest.Collector[int]{})
	p := build(t, b)
	g := p.Graph()
	checkMermaid(t, g)
	checkDOT(t, g)
	m := g.Mermaid()
	assert.Contains(t, m, `say #quot;hi#quot;`)
	assert.Contains(t, m, `#lt;b#gt;bold#lt;/b#gt;`)
	assert.Contains(t, m, `two\nlines`)
	assert.Contains(t, m, `#35;35; #amp; #35;quot;`)
	assert.Contains(t, m, `crème brûlée ☕`)
	assert.Contains(t, g.DOT(), `label="say \"hi\"\n`)
	assert.Contains(t, g.DOT(), `label="back\\slash\n`)
	assert.Contains(t, g.DOT(), `label="two\\nlines\n`)
}

// With stats, each node's label gets its counts, and nodes that failed or
// dead-lettered are marked.
func TestGraphWithStats(t *testing.T) {
	t.Parallel()
	b := pipeline.New("counts", pipeline.WithDeadLetter(deadletter.NewMemory(10)), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.DeadLetter
	}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(ints(1500)...))
	tr := pipeline.Transform(b, "call", src, pipelinetest.FailAlways(errors.New("boom"), 3, 5, 7))
	kept := pipeline.Filter(b, "keep", tr, func(x int) bool { return x%2 == 0 })
	pipeline.Sink(b, "store", kept, &pipelinetest.Collector[int]{})
	p := build(t, b)
	static := p.Graph()
	res, err := p.Run(t.Context())
	require.NoError(t, err)

	g := static.WithStats(p.Stats())
	assert.Equal(t, res.RunID, g.RunID)
	assert.Nil(t, static.Nodes[0].Stats, "WithStats returns a copy")
	require.NotNil(t, g.Nodes[1].Stats)
	assert.Equal(t, int64(3), g.Nodes[1].Stats.DeadLettered)
	m := g.Mermaid()
	const sp = "\u00a0"
	for _, want := range []string{
		"read<br>source · node retry 3<br>out 1" + sp + "500 of 1" + sp + "500",
		"call<br>transform · node retry 3, dead letter<br>in 1" + sp + "500 · out 1" + sp + "497 · dead 3",
		"keep<br>filter · dead letter<br>in 1" + sp + "497 · out 750 · filtered 747",
		"store<br>sink · node retry 3, dead letter<br>in 750 · out 750",
		"\n    %% counts of run " + res.RunID + "\n",
		"    style n1_call stroke:#c62828,stroke-width:3px\n",
	} {
		assert.Contains(t, m, want)
	}
	assert.Equal(t, 1, strings.Count(m, "    style "), "only the node with dead letters is marked")
	assert.Contains(t, g.DOT(), `label="call\ntransform · node retry 3, dead letter\nin 1`+sp+`500 · out 1`+sp+`497 · dead 3", fillcolor="#fff8e1", style=filled, color="#c62828", penwidth=3];`)
	checkMermaid(t, g)
	checkDOT(t, g)

	// A Result's counts, for one run, render the same way, but for the
	// source's size, which only Stats knows.
	fromResult := static.WithStats(pipeline.Stats{Pipeline: res.Pipeline, RunID: res.RunID, Nodes: res.Nodes})
	assert.Equal(t, strings.Replace(m, " of 1"+sp+"500", "", 1), fromResult.Mermaid())
}

// checkMermaid parses g's Mermaid loosely (graphdoc.ParseMermaid: every
// line a comment, the header, a node, an edge or a style; every node
// defined once with an escaped label; every edge between defined nodes)
// and checks that its nodes, in order, are g's, each label's first line
// its name, and its edges g's.
func checkMermaid(t *testing.T, g pipeline.Graph) {
	t.Helper()
	f, err := graphdoc.ParseMermaid(g.Mermaid())
	require.NoError(t, err)
	require.Len(t, f.Nodes, len(g.Nodes))
	index := map[string]int{}
	for i, n := range f.Nodes {
		index[n.ID] = i
		assert.Equal(t, printableName(g.Nodes[i].Name), strings.SplitN(n.Label, "\n", 2)[0])
	}
	require.Len(t, f.Edges, len(g.Edges))
	for i, e := range f.Edges {
		assert.Equal(t, g.Edges[i].From, index[e.From])
		assert.Equal(t, g.Edges[i].To, index[e.To])
	}
}

// printableName is a name as labels show it: control characters and
// invalid UTF-8 as Go escapes.
func printableName(name string) string {
	var sb strings.Builder
	for i, r := range name {
		switch {
		case r == '\uFFFD' && !strings.HasPrefix(name[i:], "\uFFFD"):
			fmt.Fprintf(&sb, `\x%02x`, name[i])
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\t':
			sb.WriteString(`\t`)
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// A DOT token: a quoted string, an identifier or number, "->" or one
// punctuation character.
var dotToken = regexp.MustCompile(`^(?:"(?:[^"\\]|\\.)*"|[\w.#]+|->|[{}\[\];,=])`)

// checkDOT parses g's DOT loosely: braces and brackets balance outside
// strings, every node of g is defined once with a label whose first line
// is its name, and every edge of g is there.
func checkDOT(t *testing.T, g pipeline.Graph) {
	t.Helper()
	src := g.DOT()
	var toks []string
	for rest := src; ; {
		rest = strings.TrimLeft(rest, " \t\n")
		if strings.HasPrefix(rest, "//") {
			end := strings.IndexByte(rest, '\n')
			require.GreaterOrEqual(t, end, 0)
			rest = rest[end:]
			continue
		}
		if rest == "" {
			break
		}
		tok := dotToken.FindString(rest)
		require.NotEmpty(t, tok, "no DOT token at %q", rest[:min(len(rest), 40)])
		toks = append(toks, tok)
		rest = rest[len(tok):]
	}
	depth := map[string]int{}
	for _, tok := range toks {
		switch tok {
		case "{", "[":
			depth[tok]++
		case "}":
			depth["{"]--
		case "]":
			depth["["]--
		}
		require.GreaterOrEqual(t, depth["{"], 0)
		require.GreaterOrEqual(t, depth["["], 0)
	}
	assert.Zero(t, depth["{"], "unbalanced braces")
	assert.Zero(t, depth["["], "unbalanced brackets")
	require.Equal(t, "digraph", toks[0])

	// Statements: ID [ ... ] ; and ID -> ID [ ... ] ;
	labels := map[string]string{}
	var order []string
	var edges [][2]string
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] == ";" || toks[i] == "{" {
			j := i + 1
			if j+2 < len(toks) && toks[j+1] == "->" {
				edges = append(edges, [2]string{toks[j], toks[j+2]})
				continue
			}
			if j+1 < len(toks) && toks[j+1] == "[" && toks[j] != "node" && toks[j] != "edge" {
				_, dup := labels[toks[j]]
				require.False(t, dup, "node %s defined twice", toks[j])
				order = append(order, toks[j])
				for k := j + 2; k+2 < len(toks) && toks[k] != "]"; k++ {
					if toks[k] == "label" && toks[k+1] == "=" {
						labels[toks[j]] = unquoteDOT(toks[k+2])
					}
				}
			}
		}
	}
	require.Len(t, order, len(g.Nodes))
	for i, id := range order {
		assert.Equal(t, printableName(g.Nodes[i].Name), strings.SplitN(labels[id], "\n", 2)[0])
	}
	require.Len(t, edges, len(g.Edges))
	for i, e := range edges {
		assert.Equal(t, order[g.Edges[i].From], e[0])
		assert.Equal(t, order[g.Edges[i].To], e[1])
	}
}

// unquoteDOT decodes a quoted DOT label: \" and \\, and \n as a line
// break.
func unquoteDOT(s string) string {
	s = s[1 : len(s)-1]
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			if s[i] == 'n' {
				sb.WriteByte('\n')
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// An item that failed the run shows as failed; the layers' retries show.
func TestGraphShowsAFailedRun(t *testing.T) {
	t.Parallel()
	b := pipeline.New("fails", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 2
		o.ItemRetry.Backoff = resilience.NoBackoff()
		o.ItemRetry.Classifier = resilience.AllTransient()
	}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	tr := pipeline.Transform(b, "call", src, pipelinetest.FailAlways(errors.New("boom"), 2))
	pipeline.Sink(b, "store", tr, &pipelinetest.Collector[int]{})
	p := build(t, b)
	_, err := p.Run(t.Context())
	require.Error(t, err)
	g := p.Graph().WithStats(p.Stats())
	checkMermaid(t, g)
	m := g.Mermaid()
	assert.Regexp(t, `n1_call\["call<br>transform · retry 2, node retry 3<br>in \d · out \d · failed 1 · retries 2"\]:::work`, m)
	assert.Contains(t, m, "    style n1_call stroke:#c62828,stroke-width:3px\n")
}

// The branches of an Aggregate with Late and of a Join with JoinLate are
// not a broadcast: each item goes to one of them. A stream read by two
// nodes still is.
func TestGraphBranchesAreNoBroadcast(t *testing.T) {
	t.Parallel()
	b := pipeline.New("branches", pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	at := func(v int) time.Time { return time.Unix(int64(v), 0) }
	var late pipeline.Stream[int]
	sums := pipeline.Aggregate(b, "sum", src, func(int) int { return 0 }, pipeline.TimeWindow(time.Minute),
		func() int { return 0 }, func(s, v int) int { return s + v }, pipeline.EventTime(at, 0, 0), pipeline.Late(&late))
	pipeline.Sink(b, "windows", sums, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	pipeline.Sink(b, "late", late, &pipelinetest.Collector[int]{})
	var lateL, lateR pipeline.Stream[int]
	joined := pipeline.Join(b, "j", src, src, func(v int) int { return v }, func(v int) int { return v }, time.Minute,
		func(l, r int) int { return l + r }, pipeline.JoinEventTime(at, at, 0, 0), pipeline.JoinLate(&lateL, &lateR))
	pipeline.Sink(b, "pairs", joined, &pipelinetest.Collector[int]{})
	pipeline.Sink(b, "late left", lateL, &pipelinetest.Collector[int]{})
	pipeline.Sink(b, "late right", lateR, &pipelinetest.Collector[int]{})
	g := build(t, b).Graph()
	broadcast := map[string]bool{}
	for _, e := range g.Edges {
		broadcast[g.Nodes[e.From].Name+" -> "+g.Nodes[e.To].Name] = e.Broadcast
	}
	assert.Equal(t, map[string]bool{
		"read -> sum":                 true, // one stream, three consumers
		"read -> j/left":              true,
		"read -> j/right":             true,
		"sum -> sum[windows]":         false,
		"sum -> sum[late]":            false,
		"sum[windows] -> windows":     false,
		"sum[late] -> late":           false,
		"j/left -> j/in":              false,
		"j/right -> j/in":             false,
		"j/in -> j":                   false,
		"j -> j[joins]":               false,
		"j -> j[late left]":           false,
		"j -> j[late right]":          false,
		"j[joins] -> pairs":           false,
		"j[late left] -> late left":   false,
		"j[late right] -> late right": false,
	}, broadcast)
}
