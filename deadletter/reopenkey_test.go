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

// Every string in the key counts as the file holds it: a pipeline, source,
// origin node and item type that are not UTF-8 (bytes that stand alone, a
// cut sequence, an encoded surrogate) give the key they had when written.
func TestFileHoldsAcrossReopenNonUTF8StringsOfTheKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	env := positioned(1)
	env.Pipeline = "orders\xff\xfe"
	env.Source = "csv\xe2\x80"
	env.OriginNode = "parse\xed\xa0\x80"
	env.ItemType = "order\xe9"
	// One bad byte less is another key, as it is another text in the file.
	other := env
	other.Pipeline = "orders\xff"
	first := writeAll(t, path, []deadletter.Envelope{env})
	assert.Equal(t, int64(1), first.Writes)
	again := writeAll(t, path, []deadletter.Envelope{env, other})
	assert.Equal(t, int64(1), again.Writes, "the replay writes only the other envelope")
	assert.Equal(t, int64(1), again.Duplicates)
}
