package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/connector/file"
)

// inputKey is the name under which the checkpoint file keeps the path of
// the orders file its position belongs to, beside the position of the
// source "read": a position in one file means nothing in another.
const inputKey = "read:input"

// inputIDKey is the name under which the checkpoint file keeps what
// identifies the content of the orders file its position belongs to (see
// inputID): a file edited in place keeps its path, but a byte offset in
// it may then fall at another row, or in the middle of one.
const inputIDKey = "read:input-id"

// A startPoint says where a run starts reading its orders file.
type startPoint struct {
	after int64 // rows read before, by earlier runs
	of    int64 // rows in the file; -1 when unknown (a gzip file)
	fresh bool  // at the first row
	// over says the run starts over (-fresh, another orders file, or no
	// checkpoint): the dead letters of the runs before are rotated away.
	over bool
	why  string
}

// String says it for the first line of the run's output.
func (s startPoint) String() string {
	switch {
	case s.fresh:
		return fmt.Sprintf("starting at the first row of %s (%s)", rowsOf(s.of), s.why)
	case s.of >= 0 && s.after >= s.of:
		return fmt.Sprintf("nothing to read: earlier runs read all %d rows (-fresh starts over)", s.of)
	case s.of >= 0:
		return fmt.Sprintf("resumed after row %d of %d (%s)", s.after, s.of, s.why)
	default:
		return fmt.Sprintf("resumed at the position the checkpoint holds (%s)", s.why)
	}
}

func rowsOf(n int64) string {
	if n < 0 {
		return "the file"
	}
	return fmt.Sprint(n)
}

// A checkpointFile is the job's open checkpoint, nil without one.
type checkpointFile struct{ f *checkpoint.File }

func (c *checkpointFile) store() checkpoint.Store {
	if c == nil {
		return nil
	}
	return c.f
}

func (c *checkpointFile) close() error {
	if c == nil {
		return nil
	}
	return c.f.Close()
}

// openCheckpoint opens the checkpoint file and says where the run starts:
// after the position it holds, or at the first row when it holds none,
// one of another orders file, or one of this file before its content
// changed. A run that starts over forgets the checkpoint first (-fresh
// removes it), and only then clears the tables (clearTables), so that a
// run killed in between finds no checkpoint and starts over again, rather
// than going on from the position into cleared tables.
func openCheckpoint(ctx context.Context, cfg config) (*checkpointFile, startPoint, error) {
	total, err := rowsAfter(ctx, cfg.input, nil)
	if err != nil {
		return nil, startPoint{}, err
	}
	at := startPoint{of: total, fresh: true, over: true}
	if cfg.checkpointEvery == 0 {
		at.why = "no checkpoint: -checkpoint-every 0"
		return nil, at, clearTables(ctx, cfg.db)
	}
	input, err := filepath.Abs(cfg.input)
	if err != nil {
		return nil, at, err
	}
	id, err := inputID(cfg.input)
	if err != nil {
		return nil, at, err
	}
	f, err := checkpoint.OpenFile(cfg.checkpoint)
	if err != nil {
		return nil, at, fmt.Errorf("etl: %w", err)
	}
	c := &checkpointFile{f}
	pos, err := f.Load(ctx, pipelineName, "read")
	if err != nil {
		return nil, at, errors.Join(err, c.close())
	}
	of, err := f.Load(ctx, pipelineName, inputKey)
	if err != nil {
		return nil, at, errors.Join(err, c.close())
	}
	was, err := f.Load(ctx, pipelineName, inputIDKey)
	if err != nil {
		return nil, at, errors.Join(err, c.close())
	}
	switch {
	case cfg.fresh:
		at.why = "-fresh"
	case pos == nil && of == nil:
		// No checkpoint file, or an empty one: the first run.
		at.why = "no checkpoint yet"
	case string(of) != input:
		at.why = fmt.Sprintf("the checkpoint was of %s", of)
	case string(was) != id:
		// Edited in place (or replaced): the position may no longer be at
		// the start of the row after the last one read, and the rows
		// before it may not be those loaded. Reading the file again from
		// its first row into cleared tables loses no row of it.
		at.why = fmt.Sprintf("%s changed since the checkpoint was saved", cfg.input)
	case pos == nil:
		// A run killed before its first save of this same file: it goes
		// on with the tables and dead letters of the killed one, reading
		// every row again.
		at.why, at.over = "no checkpoint yet", false
		return c, at, nil
	default:
		src, err := sourcePosition(pos)
		if err != nil {
			return nil, at, errors.Join(fmt.Errorf("etl: the checkpoint %s (run with -fresh to start over): %w", cfg.checkpoint, err), c.close())
		}
		left, err := rowsAfter(ctx, cfg.input, src)
		if err != nil {
			return nil, at, errors.Join(fmt.Errorf("etl: the checkpoint %s does not fit %s (run with -fresh to start over): %w", cfg.checkpoint, cfg.input, err), c.close())
		}
		at = startPoint{after: total - left, of: total, why: "checkpoint " + cfg.checkpoint}
		if total < 0 || left < 0 {
			at.after, at.of = 0, -1
		}
		return c, at, nil
	}
	// Starting over: forget the position, so that the pipeline does not
	// resume there, then clear the tables, and keep which file, with which
	// content, the positions saved from now on belong to. In this order: a
	// run killed after the checkpoint is gone finds none, and starts over
	// too; one killed after the tables were cleared and before the
	// checkpoint was gone would go on from its position with the rows
	// before it lost.
	if pos != nil || of != nil {
		if err := c.close(); err != nil {
			return nil, at, err
		}
		if err := os.Remove(cfg.checkpoint); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, at, fmt.Errorf("etl: start over: %w", err)
		}
		if f, err = checkpoint.OpenFile(cfg.checkpoint); err != nil {
			return nil, at, fmt.Errorf("etl: %w", err)
		}
		c = &checkpointFile{f}
	}
	if cfg.stopHalfway {
		return nil, at, errors.Join(errHalfway, c.close())
	}
	if err := clearTables(ctx, cfg.db); err != nil {
		return nil, at, errors.Join(err, c.close())
	}
	if err := f.Save(ctx, pipelineName, inputKey, []byte(input)); err != nil {
		return nil, at, errors.Join(err, c.close())
	}
	if err := f.Save(ctx, pipelineName, inputIDKey, []byte(id)); err != nil {
		return nil, at, errors.Join(err, c.close())
	}
	return c, at, nil
}

// errHalfway is the error of a start over that config.stopHalfway
// stopped.
var errHalfway = errors.New("etl: stopped halfway through starting over")

// inputID identifies the content of the orders file at path: its size,
// modification time and SHA-256. Hashing reads the whole file once per
// run, as counting its rows does already; the modification time alone
// could miss an edit that keeps the size within the clock's resolution.
func inputID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("etl: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("etl: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("etl: read %s: %w", path, err)
	}
	return fmt.Sprintf("size %d, modified %s, sha256 %x", st.Size(), st.ModTime().UTC().Format(time.RFC3339Nano), h.Sum(nil)), nil
}

// rowsAfter returns how many rows of the orders file at path follow pos
// (nil: the file's start), as file.CSV counts them for its Size; -1 for a
// gzip file.
func rowsAfter(ctx context.Context, path string, pos []byte) (int64, error) {
	src := file.CSV(path, file.CSVOptions{Header: true, FieldsPerRecord: -1})
	if err := src.Resume(pos); err != nil {
		return 0, err
	}
	if err := src.Open(ctx); err != nil {
		return 0, err
	}
	n := src.Size()
	return n, src.Close(ctx)
}

// envelopeMagic starts the bytes the checkpoint holds for the source
// when the pipeline keeps a window log, as the day windows make it do: a
// position envelope, the prefix and then JSON with a format version, the
// source's own position and the windows written (docs/checkpoints.md,
// "What is saved").
const envelopeMagic = "\x00sluice.position\x00"

// sourcePosition returns the source's own position in the bytes saved
// for it: those of an envelope, or saved itself when it is none (a
// checkpoint saved before the job kept its totals in day windows).
func sourcePosition(saved []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(saved, []byte(envelopeMagic))
	if !ok {
		return saved, nil
	}
	var env struct {
		V   int    `json:"v"`
		Pos []byte `json:"pos"`
	}
	if err := json.Unmarshal(rest, &env); err != nil {
		return nil, fmt.Errorf("the position envelope is corrupt: %w", err)
	}
	if env.V != 1 {
		return nil, fmt.Errorf("the position envelope has format version %d; this job reads version 1", env.V)
	}
	return env.Pos, nil
}
