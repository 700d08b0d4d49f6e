// Package doccheck keeps the Go code and the outputs that the docs show
// honest. ParsePage reads the fenced blocks of a markdown page, with the
// hidden preludes that give a fragment the declarations it leaves out;
// Write turns the pages' Go blocks into packages, which Vet compiles in
// one go vet; CheckOutputs makes sure that every block of output is
// produced by a test or says it is abridged (see there), and Page.Output
// finds a block for the test that produces it.
//
// The conventions, for whoever writes a page:
//
//   - A ```go block that starts with a package clause is a whole file and
//     compiles as it is, in a package of its own.
//   - Any other ```go block is a fragment. A fragment made only of
//     declarations (func, type, var, const, import) is compiled at the top
//     level of the page's package, so a later block of the page can use
//     what it declares; any other fragment is the body of a function of
//     its own that returns an error (so "return err" compiles). Variables
//     a fragment declares but does not use are fine.
//   - Packages a fragment names (context.Context, pipeline.New) are
//     imported for it when the name is unique among the standard library
//     and the module's packages; an import line in a prelude (or at the
//     top of the fragment) names any other package, or picks among the
//     standard library's namesakes (math/rand, crypto/rand).
//   - A hidden comment "<!-- go prelude" ... "-->" anywhere on the page
//     holds top-level Go declarations for every fragment of the page (the
//     ctx, the Order type, the pricer they take for granted); a hidden
//     comment "<!-- go" ... "-->" right before a block holds declarations
//     for that block alone (statements, inside its function, when the
//     block is a function body).
//   - In a Go block, a line of only "..." or a block "{ ... }" stands for
//     code left out.
//   - A ```go block opts out only with a first line "// not compiled:"
//     and a reason, which the reader sees too.
//   - Any other block (```sh, ```text, ```json, ```output) is not Go;
//     CheckOutputs wants every block to have a language.
package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A Block is one fenced code block of a markdown page.
type Block struct {
	// File is the page's path as given to Blocks.
	File string
	// Line is the 1-based line of the block's first content line (the one
	// after the opening fence).
	Line int
	// Lang is the first word of the fence's info string ("go", "sh"),
	// lowercased, with "golang" as "go"; or "" for a block without one.
	Lang string
	// Text is the block's content with the fence's indentation and the
	// markers of any "> " quote it is in removed,
	// ending with a newline unless it is empty.
	Text string
	// Before is the hidden "<!-- go ... -->" comment right before the
	// block: its Go code, or "" for none.
	Before string
	// BeforeLine is the markdown line of Before's first line.
	BeforeLine int
	// Intro is the last paragraph of prose before the block (hidden
	// comments and blank lines between are passed over), its lines joined
	// by spaces.
	Intro string
	// Marker is the text of any other HTML comment that ends on the line
	// right before the opening fence (blank lines between are allowed),
	// such as "output: cmd/sluice TestDocDLQStats", trimmed; "" for none.
	Marker string
}

// A Page is a markdown page's fenced blocks and its prelude.
type Page struct {
	// File is the page's path as given to ReadPage.
	File string
	// Blocks are the page's fenced blocks in order.
	Blocks []Block
	// Prelude is the Go code of the page's "<!-- go prelude" comments,
	// joined, and PreludeLine the markdown line where the first begins.
	Prelude     string
	PreludeLine int
}

// SkipReason is the reason a Go block gives for not being compiled, or ""
// for a block that is compiled; Skips reports whether it opts out at all
// (an opt-out without a reason is an error).
func (b Block) SkipReason() string {
	first, _, _ := strings.Cut(b.Text, "\n")
	reason, ok := strings.CutPrefix(strings.TrimSpace(first), "// not compiled:")
	if !ok {
		return ""
	}
	return strings.TrimSpace(reason)
}

// Skips reports whether the block's first line is "// not compiled:".
func (b Block) Skips() bool {
	first, _, _ := strings.Cut(b.Text, "\n")
	return strings.HasPrefix(strings.TrimSpace(first), "// not compiled:")
}

// fence matches an opening fence: its prefix (the indentation of a list
// item, in spaces or tabs, and the markers of any "> " quotes it is in),
// the fence, and the language.
var fence = regexp.MustCompile("^((?:[ \\t]*>)*[ \\t]*)(`{3,}|~{3,})\\s*([^`\\s]*)[^`]*$")

// language returns the language a fence's first word names, lowercased:
// "Go" and "golang" are "go".
func language(word string) string {
	word = strings.ToLower(word)
	if word == "golang" {
		return "go"
	}
	return word
}

// ReadPage reads a markdown page.
func ReadPage(path string) (*Page, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePage(path, string(data))
}

// ParsePage parses the text of a markdown page named file. It fails on a
// fence or a hidden comment left open, and on a "<!-- go" comment that no
// block follows.
func ParsePage(file, text string) (*Page, error) {
	p := &Page{File: file}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}

	var (
		pendingGo     string // a "<!-- go" comment waiting for its block
		pendingGoLine int
		marker        string // the last other comment, while only blank lines follow
		intro         string // the last paragraph of prose
		blank         bool   // a blank line ended it
	)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "<!--") {
			start := i
			body := strings.TrimPrefix(trimmed, "<!--")
			for !strings.Contains(lines[i], "-->") {
				i++
				if i == len(lines) {
					return nil, fmt.Errorf("%s:%d: comment not closed", file, start+1)
				}
				body += "\n" + lines[i]
			}
			body, _, _ = strings.Cut(body, "-->")
			head, rest, _ := strings.Cut(body, "\n")
			switch strings.TrimSpace(head) {
			case "go prelude":
				if p.Prelude == "" {
					p.PreludeLine = start + 2
				}
				p.Prelude += dedent(rest) + "\n"
				marker = ""
			case "go":
				if pendingGo != "" {
					return nil, fmt.Errorf("%s:%d: a \"<!-- go\" comment without a block after it", file, pendingGoLine-1)
				}
				pendingGo, pendingGoLine = dedent(rest)+"\n", start+2
				marker = ""
			default:
				marker = strings.TrimSpace(body)
			}
			continue
		}
		m := fence.FindStringSubmatch(line)
		if m == nil {
			if trimmed != "" {
				if pendingGo != "" {
					return nil, fmt.Errorf("%s:%d: a \"<!-- go\" comment must come right before its block", file, pendingGoLine-1)
				}
				if blank || intro == "" {
					intro = trimmed
				} else {
					intro += " " + trimmed
				}
				marker, blank = "", false
			} else {
				blank = true
			}
			continue
		}
		prefix, mark, lang := m[1], m[2], language(m[3])
		if pendingGo != "" && lang != "go" {
			return nil, fmt.Errorf("%s:%d: a \"<!-- go\" comment before a block that is not Go", file, pendingGoLine-1)
		}
		b := Block{File: file, Line: i + 2, Lang: lang, Before: pendingGo, BeforeLine: pendingGoLine, Marker: marker, Intro: intro}
		pendingGo, pendingGoLine, marker, intro, blank = "", 0, "", "", false
		var content []string
		closed := false
		for i++; i < len(lines); i++ {
			l := strip(lines[i], prefix)
			if t := strings.TrimSpace(l); strings.HasPrefix(t, mark) && strings.Trim(t, mark[:1]) == "" {
				closed = true
				break
			}
			if lang == "go" {
				l = elide(l)
			}
			content = append(content, l)
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: code block not closed", file, b.Line-1)
		}
		if len(content) > 0 {
			b.Text = strings.Join(content, "\n") + "\n"
		}
		p.Blocks = append(p.Blocks, b)
	}
	if pendingGo != "" {
		return nil, fmt.Errorf("%s:%d: a \"<!-- go\" comment without a block after it", file, pendingGoLine-1)
	}
	return p, nil
}

// elide turns the "..." that stands for code left out, a line of its own
// or a block "{ ... }", into a comment.
func elide(line string) string {
	if strings.TrimSpace(line) == "..." {
		return strings.Replace(line, "...", "// ...", 1)
	}
	return strings.ReplaceAll(line, "{ ... }", "{ /* ... */ }")
}

// strip removes from a line of a block what its opening fence's prefix
// holds: the markers of the quotes it is in ("> "), then up to as much
// indentation as the fence has after them (the indentation of a block
// inside a list item; a tab counts as 4 spaces).
func strip(line, prefix string) string {
	for range strings.Count(prefix, ">") {
		t := strings.TrimLeft(line, " \t")
		if !strings.HasPrefix(t, ">") {
			break
		}
		line = t[1:]
	}
	if i := strings.LastIndexByte(prefix, '>'); i >= 0 {
		prefix = prefix[i+1:]
	}
	for n := width(prefix); n > 0; {
		switch {
		case strings.HasPrefix(line, " "):
			n--
		case strings.HasPrefix(line, "\t"):
			n -= 4
		default:
			return line
		}
		line = line[1:]
	}
	return line
}

// width returns the columns of indentation s, spaces and tabs, takes: a
// tab counts as 4.
func width(s string) int {
	return strings.Count(s, " ") + 4*strings.Count(s, "\t")
}

// dedent returns s without trailing blank space; the Go in a comment keeps
// its own indentation, which gofmt does not care about.
func dedent(s string) string {
	return strings.TrimRight(s, " \t\n")
}

// Pages reads README.md and every docs/*.md page under root, the
// directory of the repository, with paths relative to root.
func Pages(root string) ([]*Page, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	pages := make([]*Page, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, f)
		if err != nil {
			return nil, err
		}
		p, err := ParsePage(filepath.ToSlash(rel), string(data))
		if err != nil {
			return nil, err
		}
		pages = append(pages, p)
	}
	return pages, nil
}
