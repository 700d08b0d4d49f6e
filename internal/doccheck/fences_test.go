package doccheck_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/doccheck"
	"github.com/sluicehq/sluice/internal/require"
)

// Every way a page may fence a Go block is seen as Go, so that it is
// compiled: the language in any case and as "golang", a fence indented
// with a tab in a list, and a fence inside a "> " quote. Its text is the
// code without the quote's markers or the fence's indentation.
func TestGoBlocksSeenHoweverFenced(t *testing.T) {
	for name, page := range map[string]string{
		"golang":        "# t\n\n```golang\nvar x int = 1\n```\n",
		"Go":            "# t\n\n```Go\nvar x int = 1\n```\n",
		"tab in list":   "# t\n\n1. a step\n\n\t```go\n\tvar x int = 1\n\t```\n",
		"blockquote":    "# t\n\n> ```go\n> var x int = 1\n> ```\n",
		"quote in list": "# t\n\n- a\n\n  > ```Golang\n  > var x int = 1\n  > ```\n",
		"tilde":         "# t\n\n~~~GO title=\"x\"\n var x int = 1\n~~~\n",
	} {
		t.Run(name, func(t *testing.T) {
			p, err := doccheck.ParsePage("x.md", page)
			require.NoError(t, err)
			require.Len(t, p.Blocks, 1)
			assert.Equal(t, "go", p.Blocks[0].Lang)
			assert.Equal(t, "var x int = 1\n", strings.TrimLeft(p.Blocks[0].Text, " "))
		})
	}
}
