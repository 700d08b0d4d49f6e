package fielddoc_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/fielddoc"
	"github.com/sluicehq/sluice/internal/require"
)

const src = `package p

// T is documented; not all of its fields are.
type T struct {
	// A has a doc comment.
	A int
	B int // B has a line comment.
	C int
	D, E string
	// F and G share one.
	F, G string
	hidden int
	embedded
}

type embedded struct{ X int }

type NotStruct int
`

func TestUndocumented(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\ntype InTest struct{ Z int }\n"), 0o644))

	missing, err := fielddoc.Undocumented(dir, "T")
	require.NoError(t, err)
	assert.Equal(t, []string{"T.C", "T.D", "T.E"}, missing)

	_, err = fielddoc.Undocumented(dir, "Gone")
	assert.ErrorContains(t, err, "no type Gone", "a renamed type does not pass silently")
	_, err = fielddoc.Undocumented(dir, "InTest")
	assert.ErrorContains(t, err, "no type InTest", "test files are not the package's API")
	_, err = fielddoc.Undocumented(dir, "NotStruct")
	assert.ErrorContains(t, err, "not a struct")

	structs, err := fielddoc.Structs(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"T"}, structs,
		"only exported struct types of the non-test files are listed")
}

// An embedded field of an exported type (type Options struct { Backoff })
// is a field a user sets (o.Backoff = ...), named by its type, plain, by
// pointer or from another package, so it is reported when it has no doc
// comment, like a named field. An embedded unexported type is not.
func TestUndocumentedReportsEmbeddedExportedFields(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte(`package x

import "time"

// Inner is documented.
type Inner struct {
	// N is documented.
	N int
}

// Options embeds Inner without a word.
type Options struct {
	Inner
	*Other
	time.Duration
	Generic[int]
	inner
	// Documented is embedded with a doc comment.
	Documented
}

// Other is documented.
type Other struct{}

// Generic is documented.
type Generic[T any] struct{}

// Documented is documented.
type Documented struct{}

type inner struct{}
`), 0o600))
	missing, err := fielddoc.Undocumented(dir, "Options")
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"Options.Inner", "Options.Other", "Options.Duration", "Options.Generic"}, missing)
}
