package doccheck_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// A doc sentence that cites a test as its proof (`TestX`, `BenchmarkX`,
// `ExampleX`, `FuzzX`) names one that exists in the repository: a test
// renamed or removed would leave the sentence unproven (docs/rabbitmq.md
// cited `TestSourceConfigValidate`, a name no test had).
func TestDocsCiteTestsThatExist(t *testing.T) {
	dir := root(t)
	cite := regexp.MustCompile("`((?:Test|Benchmark|Example|Fuzz)[A-Za-z0-9_]+)`")
	def := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)[A-Za-z0-9_]+)\(`)
	defined := map[string]bool{}
	cited := map[string][]string{} // name -> pages
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, "_test.go"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range def.FindAllSubmatch(b, -1) {
				defined[string(m[1])] = true
			}
		case strings.HasSuffix(path, ".md"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			for _, m := range cite.FindAllSubmatch(b, -1) {
				cited[string(m[1])] = append(cited[string(m[1])], rel)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, len(defined) > 100, "found %d tests: is the walk in the repository?", len(defined))
	require.True(t, len(cited) > 100, "found %d citations in the pages", len(cited))
	var missing []string
	for name, pages := range cited {
		if !defined[name] {
			slices.Sort(pages)
			missing = append(missing, name+" (cited in "+strings.Join(slices.Compact(pages), ", ")+")")
		}
	}
	slices.Sort(missing)
	assert.Empty(t, missing, "the pages cite tests that do not exist:\n%s", strings.Join(missing, "\n"))
}
