package file

import (
	"encoding/csv"
	"io"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

func readAllLazy(s string, comma rune, trim bool) ([][]string, error) {
	cr := csv.NewReader(strings.NewReader(s))
	cr.Comma, cr.LazyQuotes, cr.TrimLeadingSpace, cr.FieldsPerRecord = comma, true, trim, -1
	var out [][]string
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

// Differential, over random short records and separators: under LazyQuotes, a last record (read whole, one record)
// is open iff a "\n" and a line appended continue its last field, i.e.
// encoding/csv's first record of rec+"\n"+"x\n" differs from rec's.
func TestQuoteOpenAgreesWithEncodingCSV(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	alpha := []rune{'"', '"', ',', ';', '§', ' ', '\t', '\r', '\n', 'a', 'b'}
	var bad []string
	for i := 0; i < 50000 && len(bad) < 8; i++ {
		n := 1 + rng.Intn(7)
		var b strings.Builder
		for range n {
			b.WriteRune(alpha[rng.Intn(len(alpha))])
		}
		rec := b.String()
		if rec[0] == '\n' || strings.HasPrefix(rec, "\r\n") {
			continue
		}
		comma := []rune{',', ';', '§', '\t'}[rng.Intn(4)]
		trim := rng.Intn(2) == 0
		alone, err := readAllLazy(rec, comma, trim)
		if err != nil || len(alone) != 1 {
			continue
		}
		more, err := readAllLazy(rec+"\nx\n", comma, trim)
		if err != nil || len(more) == 0 {
			continue
		}
		want := !reflect.DeepEqual(more[0], alone[0])
		if got := (csvFormat{opts: CSVOptions{Comma: comma, LazyQuotes: true, TrimLeadingSpace: trim, FieldsPerRecord: -1}}).quoteOpen([]byte(rec)); got != want {
			bad = append(bad, strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`).Replace(rec)+" comma="+string(comma)+" trim="+map[bool]string{true: "y", false: "n"}[trim]+" quoteOpen="+map[bool]string{true: "open", false: "closed"}[got])
		}
	}
	if len(bad) > 0 {
		t.Errorf("quoteOpen disagrees with encoding/csv on:\n%s", strings.Join(bad, "\n"))
	}
}
