package fielddoc_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/fielddoc"
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
}
