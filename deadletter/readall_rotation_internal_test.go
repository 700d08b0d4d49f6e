package deadletter

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// A sink that rotates twice between ReadAll's opening of path and its
// listing of the rotated files: ReadAll reads what path held when it was
// opened, last and once, in order, and leaves the file rotated after it,
// which holds only letters written since (a second review's suspicion).
func TestReadAllWhenTheSinkRotatesTwiceBeforeTheListing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := OpenFile(path)
	require.NoError(t, err)
	defer f.Close()
	write := func(id int) {
		raw, _ := json.Marshal(map[string]int{"id": id})
		require.NoError(t, f.Write(context.Background(), Envelope{Pipeline: "p", OriginNode: "n", DecisionNode: "n",
			Item: json.RawMessage(raw), Err: errTest}))
	}
	write(1)
	require.NoError(t, f.Rotate()) // 1 in .000001
	write(2)                       // 2 in path
	readAllOpened = func() {
		require.NoError(t, f.Rotate()) // 2 to .000002
		write(3)
		require.NoError(t, f.Rotate()) // 3 to .000003
		write(4)
	}
	defer func() { readAllOpened = func() {} }()
	var got []int
	for env, err := range ReadAll(path) {
		require.NoError(t, err)
		var v struct{ ID int }
		require.NoError(t, json.Unmarshal(env.Item.(json.RawMessage), &v))
		got = append(got, v.ID)
	}
	assert.Equal(t, []int{1, 2}, got)
}

var errTest = testError("failed")

type testError string

func (e testError) Error() string { return string(e) }
