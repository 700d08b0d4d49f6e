package file_test

import (
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

type order struct {
	ID  int    `json:"id"`
	SKU string `json:"sku"`
}

func TestJSONLDecodesEachLineAndDeadLettersTheBadOnes(t *testing.T) {
	t.Parallel()
	content := "{\"id\":1,\"sku\":\"a\",\"more\":true}\r\n\n  \t\n{\"id\":\"two\"}\n{\"id\":3,\"sku\":\"c\"}\n{\"id\":4} {}\n{\"id\":5,"
	src := file.JSONL[order](write(t, "orders.jsonl", content, false))
	dlq := deadletterMemory(src)
	r := runFrom(t, src, nil)
	assert.Equal(t, []order{{1, "a"}, {3, "c"}}, r.items)
	assert.Equal(t, int64(5), src.Size(), "five lines that are not blank")
	assert.Equal(t, int64(3), src.BadRows())

	envs := dlq.Envelopes()
	require.Len(t, envs, 3)
	for i, want := range []struct {
		item   string
		line   int64
		column int
	}{
		{`{"id":"two"}`, 4, 11},
		{`{"id":4} {}`, 6, 10},
		{`{"id":5,`, 7, 8},
	} {
		assert.Equal(t, want.item, envs[i].Item)
		var re *file.RowError
		require.ErrorAs(t, envs[i].Err, &re)
		assert.Equal(t, want.line, re.Line, "row %d", i)
		assert.Equal(t, want.column, re.Column, "row %d", i)
	}
	var te *json.UnmarshalTypeError
	assert.ErrorAs(t, envs[0].Err, &te)
	assert.Contains(t, envs[0].ErrText, "orders.jsonl:4:11: json: cannot unmarshal string")
}

func TestJSONLOfPointersAndMaps(t *testing.T) {
	t.Parallel()
	path := write(t, "in.jsonl", "{\"id\":1}\n{\"id\":2}\n", true)
	ptrs := runFrom(t, file.JSONL[*order](path), nil)
	require.Len(t, ptrs.items, 2)
	assert.Equal(t, 2, ptrs.items[1].ID)
	maps := runFrom(t, file.JSONL[map[string]any](path), nil)
	require.Len(t, maps.items, 2)
	assert.Equal(t, float64(1), maps.items[0]["id"])
}
