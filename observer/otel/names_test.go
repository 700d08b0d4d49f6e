package otel_test

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer/otel"
)

// docs/observability.md says the instruments' names and units are chosen
// so that the OTel Prometheus exporter's default translation (dots to
// underscores, unit suffixes, _total on counters, units in braces
// dropped) gives the Prometheus plug-in's names: one dashboard serves
// both. The Prometheus table of that page is checked against the
// plug-in's own names by observer/prometheus's
// TestDocsTableNamesEveryMetric; this test checks every instrument
// against it, through the OTel table. Two instruments translated to
// names the plug-in does not have (sluice_items_fallbacks_total,
// sluice_items_late_total), and the late one was missing from the OTel
// table (a review's finding).
func TestInstrumentsTranslateToThePrometheusNames(t *testing.T) {
	f, err := os.ReadFile("../../docs/observability.md")
	require.NoError(t, err)
	promRow := regexp.MustCompile("^\\| `(sluice_[a-z_]+)` \\| (counter|gauge|histogram) \\|")
	otelRow := regexp.MustCompile("^\\| `(sluice\\.[a-z_.]+)` \\| ([A-Za-z0-9]+) \\| `([^`]+)` \\| [a-z, ]+ \\| `(sluice_[a-z_]+)` \\|")
	prom := map[string]bool{}
	type row struct{ kind, unit, translated string }
	rows := map[string]row{}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		if m := promRow.FindStringSubmatch(sc.Text()); m != nil {
			prom[m[1]] = true
		}
		if m := otelRow.FindStringSubmatch(sc.Text()); m != nil {
			rows[m[1]] = row{kind: m[2], unit: m[3], translated: m[4]}
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, prom, "no Prometheus table found")
	names := []string{otel.ItemsIn, otel.ItemsOut, otel.ItemsFailed, otel.ItemsFiltered, otel.DeadLetters,
		otel.Drops, otel.Retries, otel.RetriesExhausted, otel.Fallbacks, otel.RetryDelay, otel.CircuitState,
		otel.ItemsInFlight, otel.BrokerRetries, otel.HandedOff, otel.LateItems}
	assert.Len(t, rows, len(names), "the OTel table has a row per instrument")
	for _, name := range names {
		r, ok := rows[name]
		if !assert.True(t, ok, "the OTel table in docs/observability.md does not list %s", name) {
			continue
		}
		want := strings.ReplaceAll(name, ".", "_")
		if r.unit == "s" {
			want += "_seconds"
		}
		if strings.HasSuffix(r.kind, "Counter") && !strings.Contains(r.kind, "UpDown") {
			want += "_total"
		}
		assert.Equal(t, want, r.translated, "%s: the table's translation", name)
		assert.True(t, prom[want], "%s translates to %s, which the Prometheus plug-in does not have", name, want)
	}
}
