package deadletter_test

import (
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
)

// unencodable cannot be encoded (a chan), so the file keeps its
// item_error and item_text, which are in the key.
type unencodable struct {
	Done chan int
	Name string
}

// A replay of the same item into the file after a reopen writes no second
// envelope, also when the item could not be encoded and its text is not
// UTF-8: the key OpenFile reads back must be the key Write computed.
func TestFileHoldsAcrossReopenAnUnencodableItemWithNonUTF8Text(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	env := positioned(1)
	env.Item = unencodable{Name: "caf\xe9"}
	env.ItemType = ""
	first := writeAll(t, path, []deadletter.Envelope{env})
	assert.Equal(t, int64(1), first.Writes)
	again := writeAll(t, path, []deadletter.Envelope{env})
	assert.Equal(t, int64(0), again.Writes, "the replay writes nothing")
	assert.Equal(t, int64(1), again.Duplicates)
}
