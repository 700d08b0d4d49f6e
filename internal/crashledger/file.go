package crashledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// header is the first line of every ledger file: Open refuses a file
// without it, rather than overwrite something else by mistake.
const header = "sluice crash ledger v1"

// The records of the file, one a line: an op, a space, the id quoted as a
// Go string (so that any bytes fit on one line), and for a mark the crashes
// counted and when it was made (Unix nanoseconds).
const (
	opHold    = '+' // in flight
	opAlone   = 'a' // a suspect running alone
	opShared  = 'n' // a suspect no longer alone: others run beside it
	opSettle  = '-' // done for good: no longer in flight, mark cleared
	opRelease = 'r' // back without an outcome: no longer in flight
	opSuspect = 's' // a suspect from earlier crashes
	opCulprit = 'c' // a culprit
)

func appendRecord(b []byte, op byte, id string) []byte {
	b = append(b, op, ' ')
	b = strconv.AppendQuote(b, id)
	return append(b, '\n')
}

func appendMark(b []byte, id string, m *mark) []byte {
	op := byte(opSuspect)
	if m.culprit {
		op = opCulprit
	}
	b = append(b, op, ' ')
	b = strconv.AppendQuote(b, id)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(m.crashes), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, m.since.UnixNano(), 10)
	return append(b, '\n')
}

// A state is what a file says.
type state struct {
	marks    map[string]*mark
	inflight map[string]int
	alone    map[string]bool
	torn     bool
}

func (s *state) crashed() bool {
	for _, n := range s.inflight {
		if n > 0 {
			return true
		}
	}
	return false
}

// readFile reads the ledger at path; a missing or empty file is an empty
// state.
func readFile(path string) (*state, error) {
	st := &state{marks: map[string]*mark{}, inflight: map[string]int{}, alone: map[string]bool{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("crashledger: read %s: %w", path, err)
	}
	if len(b) == 0 {
		return st, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	line := 0
	rest := b
	for sc.Scan() {
		line++
		text := sc.Bytes()
		// The scanner also yields a last line without its newline: a
		// write cut short by the crash.
		last := len(rest) == len(text)
		if !last {
			rest = rest[len(text)+1:]
		}
		if last {
			st.torn = true
			break
		}
		if line == 1 {
			if string(text) != header {
				return nil, fmt.Errorf("crashledger: %s line 1: not a crash ledger (want %q); remove the file or choose another path", path, header)
			}
			continue
		}
		if err := st.apply(text); err != nil {
			return nil, fmt.Errorf("crashledger: %s line %d: %w; remove the file to start afresh", path, line, err)
		}
	}
	if line == 1 && st.torn && !bytes.HasPrefix([]byte(header), b) {
		// Not even the header is whole, and what there is differs from it.
		return nil, fmt.Errorf("crashledger: %s line 1: not a crash ledger (want %q); remove the file or choose another path", path, header)
	}
	return st, nil
}

var errBadRecord = errors.New("damaged record")

// apply reads one record into st.
func (st *state) apply(rec []byte) error {
	if len(rec) < 4 || rec[1] != ' ' {
		return errBadRecord
	}
	op := rec[0]
	q, err := strconv.QuotedPrefix(string(rec[2:]))
	if err != nil {
		return errBadRecord
	}
	id, _ := strconv.Unquote(q)
	more := rec[2+len(q):]
	switch op {
	case opHold, opAlone, opShared, opSettle, opRelease:
		if len(more) != 0 {
			return errBadRecord
		}
	case opSuspect, opCulprit:
		f := strings.Fields(string(more))
		if len(f) != 2 || more[0] != ' ' {
			return errBadRecord
		}
		crashes, err1 := strconv.ParseInt(f[0], 10, 64)
		since, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || crashes < 0 {
			return errBadRecord
		}
		st.marks[id] = &mark{culprit: op == opCulprit, crashes: int(crashes), since: time.Unix(0, since)}
		return nil
	default:
		return errBadRecord
	}
	switch op {
	case opHold:
		st.inflight[id]++
	case opAlone:
		st.alone[id] = true
	case opShared:
		delete(st.alone, id)
	case opSettle, opRelease:
		if st.inflight[id]--; st.inflight[id] <= 0 {
			delete(st.inflight, id)
			delete(st.alone, id)
		}
		if op == opSettle {
			delete(st.marks, id)
		}
	}
	return nil
}

// rewrite replaces the file with one that holds the header, the marks and
// what is in flight, synced, and returns it open for appending.
func (l *Ledger) rewrite() (*os.File, error) {
	b := append([]byte(header), '\n')
	for id, m := range l.marks {
		b = appendMark(b, id, m)
	}
	for id, n := range l.inflight {
		for range n {
			b = appendRecord(b, opHold, id)
		}
	}
	if l.alone != nil {
		b = appendRecord(b, opAlone, l.alone.id)
	}
	l.size = int64(len(b))
	tmp := l.path + ".tmp"
	err := writeSynced(tmp, b)
	if err == nil {
		err = os.Rename(tmp, l.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("crashledger: write %s: %w", l.path, err)
	}
	syncDir(filepath.Dir(l.path))
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("crashledger: open %s: %w", l.path, err)
	}
	return f, nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// syncDir syncs a directory, so that a rename in it survives a crash of the
// machine; where that cannot be done, the rename is as durable as the
// system makes it.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
