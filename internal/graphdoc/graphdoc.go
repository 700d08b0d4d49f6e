// Package graphdoc checks the Mermaid pictures of pipelines that the docs
// embed: ParseMermaid reads what pipeline.Graph.Mermaid writes, loosely,
// and Embedded compares a ```mermaid block of a markdown page with what the
// code renders now, or rewrites it when UpdateEnv is set.
package graphdoc

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// UpdateEnv is the variable that makes Embedded rewrite a stale block
// instead of failing. The samples' packages each rewrite docs/graph.md, so
// run them one at a time: UPDATE_DOCS=1 go test -p 1 ./samples/... (make
// docs).
const UpdateEnv = "UPDATE_DOCS"

// A Flowchart is a parsed Mermaid flowchart.
type Flowchart struct {
	Nodes []Node
	Edges []Edge
}

// A Node is a node definition: its id, its label with "<br>" as line
// breaks and entity codes decoded, and its style class.
type Node struct {
	ID, Label, Class string
}

// An Edge joins two defined nodes.
type Edge struct {
	From, To, Label string
}

var (
	nodeLine = regexp.MustCompile(`^    (\w+)(\(\[|\[\(|\{\{|\[|\()"([^"]*)"(\]\)|\)\]|\}\}|\]|\)):::(\w+)$`)
	edgeLine = regexp.MustCompile(`^    (\w+) -->\|"([^"]*)"\| (\w+)$`)
	entity   = regexp.MustCompile(`#(\w+);`)
	shapes   = map[string]string{"([": "])", "[(": ")]", "{{": "}}", "[": "]", "(": ")"}
)

// ParseMermaid parses a flowchart as pipeline.Graph.Mermaid writes it: the
// header, comments, then one node or edge per line, then class and style
// lines. It fails on any other line, on a label with a raw <, >, `
// or a # outside an entity code, on a node defined twice, and on an edge
// or a style of an undefined node.
func ParseMermaid(s string) (*Flowchart, error) {
	f := &Flowchart{}
	defined := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		bad := func(format string, a ...any) error {
			return fmt.Errorf("line %d %q: %s", i+1, line, fmt.Sprintf(format, a...))
		}
		switch {
		case i == 0 && line != "flowchart TD":
			return nil, bad("the first line must be the flowchart header")
		case i == 0:
		case strings.HasPrefix(line, "    %%") && !strings.HasPrefix(line, "    %%{"):
		case strings.HasPrefix(line, "    classDef "):
		case strings.HasPrefix(line, "    style "):
			if id := strings.Fields(line)[1]; !defined[id] {
				return nil, bad("style of undefined node %s", id)
			}
		case nodeLine.MatchString(line):
			m := nodeLine.FindStringSubmatch(line)
			if shapes[m[2]] != m[4] {
				return nil, bad("shape opens with %s and closes with %s", m[2], m[4])
			}
			if defined[m[1]] {
				return nil, bad("node %s defined twice", m[1])
			}
			defined[m[1]] = true
			bare := strings.ReplaceAll(m[3], "<br>", "\n")
			if strings.ContainsAny(bare, "<>`") || strings.Contains(entity.ReplaceAllString(bare, ""), "#") {
				return nil, bad("label is not escaped")
			}
			f.Nodes = append(f.Nodes, Node{ID: m[1], Label: decode(bare), Class: m[5]})
		case edgeLine.MatchString(line):
			m := edgeLine.FindStringSubmatch(line)
			for _, id := range []string{m[1], m[3]} {
				if !defined[id] {
					return nil, bad("edge of undefined node %s", id)
				}
			}
			f.Edges = append(f.Edges, Edge{From: m[1], To: m[3], Label: m[2]})
		default:
			return nil, bad("not a line of a pipeline's flowchart")
		}
	}
	return f, nil
}

// decode replaces entity codes with their characters.
func decode(s string) string {
	named := map[string]string{"quot": `"`, "lt": "<", "gt": ">", "amp": "&"}
	return entity.ReplaceAllStringFunc(s, func(e string) string {
		code := e[1 : len(e)-1]
		if v, ok := named[code]; ok {
			return v
		}
		var r rune
		if _, err := fmt.Sscanf(code, "%d", &r); err == nil {
			return string(r)
		}
		return e
	})
}

// Embedded checks that the markdown page doc embeds mermaid, as the block
// after the line "<!-- graph: name -->". The block must exist; with
// UpdateEnv set, a stale one is rewritten instead of failing the test.
func Embedded(t testing.TB, doc, name, mermaid string) {
	t.Helper()
	if _, err := ParseMermaid(mermaid); err != nil {
		t.Fatalf("the graph of %s does not parse: %v", name, err)
	}
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	marker := "<!-- graph: " + name + " -->\n"
	at := strings.Index(page, marker)
	if at < 0 {
		t.Fatalf("%s has no line %q", doc, strings.TrimSpace(marker))
	}
	start := at + len(marker)
	const open, end = "```mermaid\n", "```\n"
	if !strings.HasPrefix(page[start:], open) {
		t.Fatalf("%s: no ```mermaid block right after %q", doc, strings.TrimSpace(marker))
	}
	body := start + len(open)
	stop := strings.Index(page[body:], end)
	if stop < 0 {
		t.Fatalf("%s: the block of %s does not end", doc, name)
	}
	if page[body:body+stop] == mermaid {
		return
	}
	if os.Getenv(UpdateEnv) == "" {
		t.Fatalf("%s: the graph of %s is stale; regenerate it with %s=1 go test -p 1 ./samples/... (make docs). It is now:\n%s",
			doc, name, UpdateEnv, mermaid)
	}
	page = page[:body] + mermaid + page[body+stop:]
	if err := os.WriteFile(doc, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: rewrote the graph of %s", doc, name)
}
