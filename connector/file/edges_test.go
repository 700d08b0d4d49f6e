package file_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Without a header and with FieldsPerRecord 0, records are held to "the
// first record's" number of fields. A first record that does not parse is
// a bad row: it must not fix the count for the good rows after it.
func TestCSVAFirstRecordThatDoesNotParseFixesNoFieldCount(t *testing.T) {
	t.Parallel()
	content := "1,x\"y,3\n2,b,c\n3,d,e\n"
	src, dlq := memorySource(t, content, file.CSVOptions{})
	r := runFrom(t, src, nil)
	assert.Equal(t, int64(1), src.BadRows(), "only the bare quote's row is bad")
	assert.Len(t, dlq.Envelopes(), 1)
	require.Len(t, r.items, 2, "the two good rows of three fields are emitted")
}

// A bad row's envelope holds the row as in the file: a row of a Latin-1
// file (not UTF-8) read back from the dead-letter file must hold the row's
// bytes, or a re-drive cannot rebuild the row. A JSON string holds only
// UTF-8 text, so such a row is kept as a []byte, which its ItemType says.
func TestBadRowDeadLetterKeepsTheRowsBytes(t *testing.T) {
	t.Parallel()
	row := "2,caf\xe9,\"x"
	content := "id,name,q\n1,ok,1\n" + row + "\n"
	src := file.CSV(write(t, "latin1.csv", content, false), file.CSVOptions{Header: true})
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	dlq, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	src.UseDeadLetter(dlq, deadletter.Envelope{Pipeline: "p", OriginNode: "src", DecisionNode: "src"})
	require.NoError(t, src.Resume(nil))
	require.NoError(t, src.Run(context.Background(), &recorder[file.Record]{}))
	require.NoError(t, dlq.Close())
	var got [][]byte
	for env, err := range deadletter.ReadAll(path) {
		require.NoError(t, err)
		assert.Equal(t, "[]uint8", env.ItemType)
		var b []byte
		require.NoError(t, json.Unmarshal(env.Item.(json.RawMessage), &b))
		got = append(got, b)
	}
	require.Len(t, got, 1)
	assert.Equal(t, []byte(row), got[0], "the dead letter holds the row's bytes")
}

// docs/files.md: "Without checkpoints the pipeline starts each run at the
// beginning of the file." A second Run of one pipeline, with no Resume
// called by hand, reads the whole file again.
func TestASecondRunWithoutACheckpointReadsTheFileAgain(t *testing.T) {
	t.Parallel()
	path := write(t, "in.txt", "a\nb\nc\n", false)
	pb := pipeline.New("lines")
	lines := pipeline.Source(pb, "read", file.Lines(path))
	out := &pipelinetest.Collector[string]{}
	pipeline.Sink(pb, "write", lines, out)
	p, err := pb.Build()
	require.NoError(t, err)
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, out.Len())
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 6, out.Len(), "the second run emits the three lines again")
}

// The package's fuzz test resumes after every item and bad row. A bad
// row's position (its envelope's Position) must be one Resume takes also
// when CSVOptions.FieldsPerRecord fixes more fields than the row has bytes.
func TestCSVABadRowsPositionResumesWithAFixedFieldCount(t *testing.T) {
	t.Parallel()
	src, dlq := memorySource(t, "x\n1,2,3,4,5\n", file.CSVOptions{FieldsPerRecord: 5})
	all := runFrom(t, src, nil)
	require.Len(t, all.items, 1)
	envs := dlq.Envelopes()
	require.Len(t, envs, 1)
	require.NoError(t, src.Resume(envs[0].Position), "the position the source gave the bad row")
	rest := &recorder[file.Record]{}
	require.NoError(t, src.Run(context.Background(), rest))
	assert.Equal(t, all.items, rest.items)
}
