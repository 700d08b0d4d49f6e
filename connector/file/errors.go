package file

import (
	"errors"
	"fmt"
)

// ErrPosition is the error of a position that does not fit the file: bytes
// that no source of this package gave, an offset past the file's end, or
// one that is not at the end of a line (the file changed since). Resume
// reports malformed bytes; Open (or Run) reports the rest. The error
// returned wraps ErrPosition and names the file.
var ErrPosition = errors.New("file: position does not fit the file")

// ErrBadRow matches every [*RowError] with errors.Is.
var ErrBadRow = errors.New("file: bad row")

// A RowError is a row of the file that the source could not decode: a CSV
// record that does not parse or has the wrong number of fields, a JSON
// line that does not decode into the item type. The source dead-letters
// the row with it (see the package documentation).
type RowError struct {
	// Path is the file's path, as given to the source.
	Path string
	// Line is the line of the file on which the error was found, 1 for the
	// first; lines are counted from the file's start also after a resume.
	Line int64
	// Column is the 1-based byte column within that line at which the
	// decoder found the error, 0 when it did not say.
	Column int
	// Err is the decoder's error, such as csv.ErrQuote, csv.ErrFieldCount,
	// or a *json.SyntaxError.
	Err error
}

// Error returns "file: path:line:column: err" (without the column when it
// is unknown).
func (e *RowError) Error() string {
	if e.Column > 0 {
		return fmt.Sprintf("file: %s:%d:%d: %v", e.Path, e.Line, e.Column, e.Err)
	}
	return fmt.Sprintf("file: %s:%d: %v", e.Path, e.Line, e.Err)
}

// Unwrap returns e.Err.
func (e *RowError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrBadRow].
func (e *RowError) Is(target error) bool { return target == ErrBadRow }
