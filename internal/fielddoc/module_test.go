package fielddoc_test

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/fielddoc"
	"github.com/sluicehq/sluice/internal/require"
)

// moduleRoot is the repository's root (the core module's directory, which
// holds the nested modules too), seen from this package's.
const moduleRoot = "../.."

// Every exported field of every exported struct of every package a user
// can import (the options, configs, stats, events, results and errors of
// pipeline, resilience, observer, deadletter, idempotency, the connectors
// and their helper packages) has a doc comment saying what it does and
// what its zero value means. Packages and structs are found, not listed,
// so a new one cannot escape the check. Left out, because no user imports
// them: packages under internal/, and commands and samples (package main).
// The files are parsed, not built, so the connectors' tests, which need
// their brokers, do not run.
func TestExportedFieldsAreDocumented(t *testing.T) {
	t.Parallel()
	var checked []string
	err := filepath.WalkDir(moduleRoot, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(moduleRoot, dir)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." && (name == "testdata" || name == "internal" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(dir, 0)
		if errors.As(err, new(*build.NoGoError)) {
			return nil
		}
		require.NoError(t, err, rel)
		if pkg.Name == "main" {
			return nil
		}
		types, err := fielddoc.Structs(dir)
		require.NoError(t, err, rel)
		missing, err := fielddoc.Undocumented(dir, types...)
		require.NoError(t, err, rel)
		assert.Empty(t, missing, "%s: exported fields without a doc comment", rel)
		checked = append(checked, rel)
		return nil
	})
	require.NoError(t, err)
	for _, rel := range []string{"pipeline", "resilience", "observer", "deadletter", "idempotency",
		"connector/rabbitmq", "connector/nats"} {
		assert.True(t, slices.Contains(checked, rel), "%s was not checked: the walk missed it", rel)
	}
}
