// Package file holds sources that read a file and resume where a run
// stopped: [Lines] emits each line, [CSV] each record, [JSONL] each JSON
// line decoded into a type.
//
// # Positions
//
// Each item is emitted with node.Emitter's EmitAt and a position: the
// point just after the item, as the number of bytes of input before the
// next item and the line it starts after. When the pipeline keeps
// checkpoints (pipeline.WithCheckpoint), a run after a crash calls
// [Source.Resume] with the last saved position, and the source goes on
// with the item after it; line numbers in errors still count from the
// file's start. A position's bytes are the package's own, to be kept as
// given: their encoding is not part of the API. A position that does not
// fit the file (bytes no source gave, an offset past the file's end, or
// one whose byte before it is not what ended the line it was given after,
// as when the file changed) is an error wrapping [ErrPosition] that names
// the file. A file a writer appends to is read on from the position: after
// a last line that had no end, the end appended later is skipped, not
// emitted as an empty line, and a last line that the file now continues
// (its item was cut short) is an [ErrPosition].
//
// # Compressed input
//
// A file that starts with the gzip magic bytes (1f 8b) is decompressed,
// whatever its name; offsets count decompressed bytes. A gzip stream
// cannot seek: a resumed source reads and drops everything before its
// position, a cost linear in the position.
//
// # Bad rows
//
// A row that does not decode (a CSV record that does not parse or has the
// wrong number of fields, a JSON line that does not decode into the item
// type) is a permanent error of that row, not of the run. The source
// dead-letters it itself, through the pipeline's dead-letter sink
// (pipeline.WithDeadLetter), before it reads the next row: the envelope's
// Item is the row as in the file without its line end, a string when it is
// valid UTF-8 and a []byte otherwise (a JSON string holds only UTF-8), its
// Err a [*RowError]
// naming the file, line and column, and its Source and Position the source
// and the position after the row. A pipeline without a dead-letter sink
// fails the run with the RowError instead: nothing is dropped unseen. A
// dead-letter write that fails fails the run too, and the row is read again
// by the next run (or node restart). The file's last line, without its
// end, that does not decode is dead-lettered, and the source stays before
// it, as a writer may be in the middle of it: a later Run reads it again,
// and dead-letters it again only if it changed. The source remembers
// every bad row it dead-lettered since its last item (up to 4096, and the
// last line without its end always): a run resumed where they start (a
// pipeline's next run, from its checkpoint, or the file's start, nil, when
// no item comes before them) does not dead-letter them again either. A
// Resume to another position forgets them: the resumed run reads them as
// any row after its position.
//
// # Lines
//
// Lines end with "\n" or "\r\n", which items do not include; the last line
// may lack it. A line may be of any length: it is held in memory whole. A
// UTF-8 byte order mark at the start of the file is skipped.
//
// # Size
//
// A source is a node.Sized: at Open it counts the lines of a regular file
// from its position to the end (for CSV, the lines that are not empty,
// less the header; for JSONL, those that are not blank), which takes about
// as long as reading the file once. For [Lines] and [JSONL] that is the
// number of items the run reads; a CSV record with line breaks in quoted
// fields counts once per line. Bad rows are counted but not emitted. The
// size of a gzip file is unknown (-1), and so is that of a file that is not
// regular.
//
// # Pipes
//
// A path that is not a regular file, such as a named pipe or /dev/stdin,
// is read as a stream: a resumed source reads forward to its position,
// and a CSV source with a header, which it reads again from the start,
// does not resume in one ([ErrPosition]).
// Opening a named pipe waits for a writer, and a read for the writer to
// write: the context of Open and Run ends either wait.
package file

// Lines returns a source that emits each line of the file at path, without
// its end ("\n" or "\r\n"); empty lines are emitted as "".
func Lines(path string) *Source[string] {
	return newSource[string](path, linesFormat{})
}

// CSV returns a source that emits each record of the CSV file at path,
// read with encoding/csv and opts. Empty lines are skipped, as
// encoding/csv does.
func CSV(path string, opts CSVOptions) *Source[Record] {
	return newSource[Record](path, csvFormat{opts: opts})
}

// JSONL returns a source that emits each line of the file at path (JSON
// Lines) decoded into a T with encoding/json's Unmarshal: fields the type
// does not have are ignored, and a line holding more than one value is a
// bad row. Lines of only white space are skipped.
func JSONL[T any](path string) *Source[T] {
	return newSource[T](path, jsonlFormat[T]{})
}
