package prometheus_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	promclient "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// The parts of a Grafana dashboard that the checks read.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Panels        []panel
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int     `json:"id"`
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Collapsed   bool    `json:"collapsed"`
	Datasource  *dsRef  `json:"datasource"`
	GridPos     gridPos `json:"gridPos"`
	Targets     []target
	Panels      []panel `json:"panels"` // a row's panels while it is collapsed
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type gridPos struct{ X, Y, W, H int }

type target struct {
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	Datasource *dsRef `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "..."} as the Prometheus editor saves it
	Definition string          `json:"definition"`
	Datasource *dsRef          `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
}

// queries returns the PromQL a variable runs, in either form Grafana saves.
func (v variable) queries() []string {
	var out []string
	var s string
	var obj struct {
		Query string `json:"query"`
	}
	switch {
	case json.Unmarshal(v.Query, &s) == nil:
		out = append(out, s)
	case json.Unmarshal(v.Query, &obj) == nil:
		out = append(out, obj.Query)
	}
	if v.Definition != "" {
		out = append(out, v.Definition)
	}
	return out
}

const (
	dashboardFile = "dashboard.json"
	dsVariable    = "${datasource}"
)

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	require.True(t, json.Valid(raw), "%s is not valid JSON", dashboardFile)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

// metricRE matches an identifier that starts with sluice_: the PromQL
// characters of a metric name, not preceded by one (so my_sluice_x does
// not count).
var metricRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])(sluice_[A-Za-z0-9_:]*)`)

// stringRE matches a PromQL string literal: a label value, not a name.
var stringRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")

// metricNames returns the sluice_ identifiers of a query outside its
// string literals, in order, with the offset just past each.
func metricNames(expr string) (names []string, ends []int) {
	blanked := stringRE.ReplaceAllStringFunc(expr, func(s string) string { return strings.Repeat(" ", len(s)) })
	for _, m := range metricRE.FindAllStringSubmatchIndex(blanked, -1) {
		names = append(names, expr[m[2]:m[3]])
		ends = append(ends, m[3])
	}
	return names, ends
}

// exported maps every series name a registry exposes to its family: a
// counter or gauge by its own name, a histogram only by its _bucket, _sum
// and _count series (a bare histogram name selects nothing in PromQL).
type exported map[string]string

func exportedFrom(mfs []*dto.MetricFamily) exported {
	e := exported{}
	for _, mf := range mfs {
		name := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				e[name+s] = name
			}
		case dto.MetricType_SUMMARY:
			e[name], e[name+"_sum"], e[name+"_count"] = name, name, name
		default:
			e[name] = name
		}
	}
	return e
}

func (e exported) families() []string {
	var out []string
	for _, f := range e {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// scrapedAfterScriptedRun gathers a real registry after the scripted run of
// prometheus_test.go, which makes every family appear: retries with their
// delays, exhaustion, a dead letter, a drop, a filter, items in flight and
// (closed) breakers. It also returns the names the Collector describes.
func scrapedAfterScriptedRun(t *testing.T) (exported, []string) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	c := prometheus.New()
	p := scripted(t, clock, c)
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	run := pipelinetest.Start(t.Context(), p)
	_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	require.NoError(t, err)
	// Broker retries, hand-offs and late items are exported once a node
	// counted some, which takes a broker or an event-time window: a
	// pipeline whose counters say so stands in.
	require.NoError(t, c.UseStats(statsFunc(func() observer.Stats {
		return observer.Stats{Pipeline: "brokered", Nodes: []observer.NodeStats{
			{Node: "handle", Kind: observer.KindTransform, BrokerRetries: 2, HandedOff: 1},
			{Node: "hourly", Kind: observer.KindAggregate, DeadLettered: 1, Late: 1}}}
	})))
	mfs, err := reg.Gather()
	require.NoError(t, err)

	ch := make(chan *promclient.Desc, 64)
	c.Describe(ch)
	close(ch)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var described []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, m, "no fqName in %s", d)
		described = append(described, m[1])
	}
	slices.Sort(described)
	return exportedFrom(mfs), described
}

// statsFunc is a StatsReader made of a function.
type statsFunc func() observer.Stats

func (f statsFunc) Stats() observer.Stats { return f() }

// allPanels returns every panel, rows and the panels of collapsed rows
// included.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// selectorRE matches the label matchers right after a metric name.
var selectorRE = regexp.MustCompile(`^\{([^}]*)\}`)

// problems lists what is wrong with a dashboard, given what the collector
// exports: every check of the dashboard, so that a test can feed it a
// broken one.
func problems(d dashboard, exp exported) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if d.Title == "" || d.UID == "" {
		bad("the dashboard needs a title and a uid")
	}
	if d.SchemaVersion < 36 {
		bad("schemaVersion %d is older than Grafana 9", d.SchemaVersion)
	}

	used := map[string]bool{}
	checkQuery := func(where, q string) {
		names, _ := metricNames(q)
		for _, n := range names {
			if _, ok := exp[n]; !ok {
				bad("%s: %s is not a metric the collector exports", where, n)
			}
		}
	}

	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.Title == "" {
			bad("%s has no title", where)
		}
		if p.ID <= 0 {
			bad("%s has no id", where)
		} else if other, dup := ids[p.ID]; dup {
			bad("%s has the id of %q", where, other)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				bad("%s: a row has no queries", where)
			}
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dsVariable {
			bad("%s: its datasource is not %s", where, dsVariable)
		}
		if p.FieldConfig.Defaults.Unit == "" {
			bad("%s has no unit", where)
		}
		if len(p.Targets) == 0 {
			bad("%s has no query", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			where := fmt.Sprintf("%s query %s", where, tg.RefID)
			if refs[tg.RefID] {
				bad("%s: refId used twice", where)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != dsVariable {
				bad("%s: its datasource is not %s", where, dsVariable)
			}
			names, ends := metricNames(tg.Expr)
			if len(names) == 0 {
				bad("%s names no sluice_ metric: %q", where, tg.Expr)
			}
			checkQuery(where, tg.Expr)
			for i, n := range names {
				used[exp[n]] = true
				sel := selectorRE.FindStringSubmatch(tg.Expr[ends[i]:])
				if sel == nil || !strings.Contains(sel[1], `pipeline=~"$pipeline"`) || !strings.Contains(sel[1], `node=~"$node"`) {
					bad("%s: %s is not filtered by $pipeline and $node", where, n)
				}
			}
			switch {
			case strings.Contains(tg.Expr, "histogram_quantile(") && p.FieldConfig.Defaults.Unit != "s":
				bad("%s: a quantile of delays is in seconds (unit s)", where)
			case !strings.Contains(tg.Expr, "histogram_quantile(") && strings.Contains(tg.Expr, "rate(") && p.FieldConfig.Defaults.Unit != "ops":
				bad("%s: a rate is in ops/s (unit ops)", where)
			}
		}
	}
	delete(used, "") // names that are not exported, reported above
	for _, f := range exp.families() {
		if !used[f] {
			bad("%s is used by no panel", f)
		}
	}

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("variable %s", v.Name)
		if v.Datasource == nil || v.Datasource.UID != dsVariable {
			bad("%s: its datasource is not %s", where, dsVariable)
		}
		qs := v.queries()
		if len(qs) == 0 {
			bad("%s has no query", where)
		}
		for _, q := range qs {
			checkQuery(where, q)
		}
	}
	if ds, ok := vars["datasource"]; !ok || ds.Type != "datasource" || string(ds.Query) != `"prometheus"` {
		bad("no datasource variable choosing a Prometheus data source")
	}
	for _, name := range []string{"pipeline", "node"} {
		if v, ok := vars[name]; !ok || v.Type != "query" || !v.Multi || !v.IncludeAll {
			bad("no multi-select %s variable with All", name)
		}
	}
	if v, ok := vars["node"]; ok && !slices.ContainsFunc(v.queries(), func(q string) bool { return strings.Contains(q, "$pipeline") }) {
		bad("variable node does not follow $pipeline")
	}

	out = append(out, overlaps(d.Panels)...)
	return out
}

// overlaps reports panels that leave the 24 columns or cover each other,
// among the panels shown together (a collapsed row's panels are laid out
// on their own).
func overlaps(ps []panel) []string {
	var out []string
	for i, p := range ps {
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			out = append(out, fmt.Sprintf("panel %q: gridPos %+v is off the grid", p.Title, g))
		}
		for _, q := range ps[:i] {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				out = append(out, fmt.Sprintf("panels %q and %q overlap", q.Title, p.Title))
			}
		}
		out = append(out, overlaps(p.Panels)...)
	}
	return out
}

func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	exp, described := scrapedAfterScriptedRun(t)
	require.Equal(t, described, exp.families(),
		"the scripted run must make every metric the Collector describes appear, or the dashboard cannot be checked against it")
	assert.Contains(t, exp, prometheus.RetryDelay+"_bucket")

	assert.Empty(t, problems(loadDashboard(t), exp))
}

func TestMetricNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (pipeline, node) (rate(sluice_items_in_total{node=~"$node"}[5m]))`, []string{"sluice_items_in_total"}},
		{`rate(sluice_retry_delay_seconds_sum[5m]) / rate(sluice_retry_delay_seconds_count[5m])`,
			[]string{"sluice_retry_delay_seconds_sum", "sluice_retry_delay_seconds_count"}},
		{`label_values(sluice_items_in_total{pipeline=~"$pipeline"}, node)`, []string{"sluice_items_in_total"}},
		{`sluice_circuit_state == 1`, []string{"sluice_circuit_state"}},
		{`sluice_items_out_total:rate5m`, []string{"sluice_items_out_total:rate5m"}},
		{`my_sluice_items_in_total + up{job="sluice_x"} + up{job='a\'sluice_y'}`, nil},
		{`sluice_drops_total{node="a\"b"} / sluice_items_in_total`, []string{"sluice_drops_total", "sluice_items_in_total"}},
	} {
		got, _ := metricNames(tc.expr)
		assert.Equal(t, tc.want, got, tc.expr)
	}
}

// TestDashboardChecksCatchMistakes breaks the dashboard one way at a time
// and expects the checks to say so: they can fail.
func TestDashboardChecksCatchMistakes(t *testing.T) {
	t.Parallel()
	exp, _ := scrapedAfterScriptedRun(t)
	find := func(t *testing.T, d *dashboard, title string) *panel {
		for i := range d.Panels {
			if d.Panels[i].Title == title {
				return &d.Panels[i]
			}
		}
		require.FailNow(t, "no panel", title)
		return nil
	}
	replace := func(title, old, with string) func(*testing.T, *dashboard) {
		return func(t *testing.T, d *dashboard) {
			p := find(t, d, title)
			require.Contains(t, p.Targets[0].Expr, old)
			p.Targets[0].Expr = strings.ReplaceAll(p.Targets[0].Expr, old, with)
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*testing.T, *dashboard)
		want   string
	}{
		{"a misspelled metric", replace("Items in per node", "sluice_items_in_total", "sluice_item_in_total"),
			"sluice_item_in_total is not a metric the collector exports"},
		{"a histogram suffix on a gauge", replace("Items in flight", "sluice_items_in_flight", "sluice_items_in_flight_bucket"),
			"sluice_items_in_flight_bucket is not a metric"},
		{"a bare histogram name", replace("Retry delay p50 / p95", "sluice_retry_delay_seconds_bucket", "sluice_retry_delay_seconds"),
			"sluice_retry_delay_seconds is not a metric"},
		{"a query that is not filtered", replace("Fallbacks per node", `, node=~"$node"`, ""),
			"sluice_fallbacks_total is not filtered by $pipeline and $node"},
		{"a metric no panel shows", func(t *testing.T, d *dashboard) {
			d.Panels = slices.DeleteFunc(d.Panels, func(p panel) bool { return p.Title == "Fallbacks per node" })
		}, "sluice_fallbacks_total is used by no panel"},
		{"a wrong name in a collapsed row", func(t *testing.T, d *dashboard) {
			d.Panels = append(d.Panels, panel{ID: 900, Type: "row", Title: "More", Collapsed: true,
				GridPos: gridPos{Y: 100, W: 24, H: 1},
				Panels: []panel{{ID: 901, Type: "timeseries", Title: "Hidden", Datasource: &dsRef{UID: dsVariable},
					GridPos: gridPos{Y: 101, W: 12, H: 8},
					Targets: []target{{RefID: "A", Datasource: &dsRef{UID: dsVariable},
						Expr: `sluice_nodes_total{pipeline=~"$pipeline", node=~"$node"}`}}}}})
			d.Panels[len(d.Panels)-1].Panels[0].FieldConfig.Defaults.Unit = "short"
		}, "sluice_nodes_total is not a metric"},
		{"a wrong name in a variable", func(t *testing.T, d *dashboard) {
			d.Templating.List[1].Query = json.RawMessage(`"label_values(sluice_items_inn_total, pipeline)"`)
			d.Templating.List[1].Definition = ""
		}, "variable pipeline: sluice_items_inn_total is not a metric"},
		{"a panel without a title", func(t *testing.T, d *dashboard) { find(t, d, "Fallbacks per node").Title = "" }, "has no title"},
		{"two panels with one id", func(t *testing.T, d *dashboard) {
			find(t, d, "Items out per node").ID = find(t, d, "Items in per node").ID
		},
			`has the id of "Items in per node"`},
		{"a fixed datasource on a panel", func(t *testing.T, d *dashboard) {
			find(t, d, "Retries by kind").Datasource = &dsRef{Type: "prometheus", UID: "P1809F7CD0C75ACF3"}
		},
			`"Retries by kind": its datasource is not ${datasource}`},
		{"a fixed datasource on a query", func(t *testing.T, d *dashboard) { find(t, d, "Retries by kind").Targets[0].Datasource = nil },
			`"Retries by kind" query A: its datasource is not ${datasource}`},
		{"a rate without ops/s", func(t *testing.T, d *dashboard) { find(t, d, "Retries by kind").FieldConfig.Defaults.Unit = "short" },
			"a rate is in ops/s"},
		{"overlapping panels", func(t *testing.T, d *dashboard) { find(t, d, "Items out per node").GridPos.X = 6 },
			`panels "Items in per node" and "Items out per node" overlap`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDashboard(t)
			tc.mutate(t, &d)
			got := problems(d, exp)
			assert.True(t, slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tc.want) }),
				"want a problem containing %q, got %q", tc.want, got)
		})
	}
}
