package sql

import (
	"reflect"
	"testing"
)

type fieldsBase struct {
	ID   int64  `db:"id"`
	Name string // column "name"
}

type fieldsPtrBase struct {
	Hidden string `db:"hidden"`
}

type fieldsItem struct {
	fieldsBase             // promoted: id, name
	*fieldsPtrBase         // an embedded pointer takes no column
	Name           string  `db:"name,key"` // shallower than fieldsBase.Name: takes "name"
	Qty            int     `db:"qty"`
	Skip           string  `db:"-"`
	unexported     string  // takes no column
	Tagged         Nested  `db:"nested"` // a tagged struct is one column
	Note           *string // column "note"
}

type Nested struct{ A, B int }

// TestStructFieldsRules: the one set of rules Query, Upsert and Outbox
// read a struct by.
func TestStructFieldsRules(t *testing.T) {
	_ = fieldsItem{unexported: ""}
	got := structFields(reflect.TypeFor[fieldsItem]())
	want := []structField{
		{column: "id", index: []int{0, 0}},
		{column: "name", index: []int{2}, key: true},
		{column: "qty", index: []int{3}},
		{column: "nested", index: []int{6}},
		{column: "note", index: []int{7}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("structFields =\n%+v\nwant\n%+v", got, want)
	}
}

// TestStructFieldsFirstAtOneDepth: of two fields naming one column at the
// same depth, the first takes it.
func TestStructFieldsFirstAtOneDepth(t *testing.T) {
	type two struct {
		A int `db:"x"`
		B int `db:"x"`
	}
	got := structFields(reflect.TypeFor[two]())
	if len(got) != 1 || got[0].index[0] != 0 {
		t.Fatalf("structFields = %+v, want the first field alone", got)
	}
}
