package doccheck_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/doccheck"
)

// Go blocks the check does not see as Go: they are never compiled, and
// CheckOutputs passes them since they have a language. (Tried in a copy
// of the repo: pages with these blocks holding `var x int = "..."` pass
// TestDocsCompile; the same block with ```go or ```go title="x" fails.)
func TestReviewGoBlocksNotSeen(t *testing.T) {
	for name, page := range map[string]string{
		"golang":      "# t\n\n```golang\nvar x int = 1\n```\n",
		"Go":          "# t\n\n```Go\nvar x int = 1\n```\n",
		"tab in list": "# t\n\n1. a step\n\n\t```go\n\tvar x int = 1\n\t```\n",
		"blockquote":  "# t\n\n> ```go\n> var x int = 1\n> ```\n",
	} {
		t.Run(name, func(t *testing.T) {
			p, err := doccheck.ParsePage("x.md", page)
			require.NoError(t, err)
			goBlocks := 0
			for _, b := range p.Blocks {
				if b.Lang == "go" {
					goBlocks++
				}
			}
			assert.Equal(t, 1, goBlocks, "blocks: %+v", p.Blocks)
		})
	}
}
