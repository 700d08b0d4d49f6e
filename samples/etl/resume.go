package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/connector/file"
)

// inputKey is the name under which the checkpoint file keeps the path of
// the orders file its position belongs to, beside the position of the
// source "read": a position in one file means nothing in another.
const inputKey = "read:input"

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

// openCheckpoint opens the checkpoint file (removed first with -fresh)
// and says where the run starts: after the position it holds, or at the
// first row when it holds none, or one of another orders file.
func openCheckpoint(ctx context.Context, cfg config) (*checkpointFile, startPoint, error) {
	total, err := rowsAfter(ctx, cfg.input, nil)
	if err != nil {
		return nil, startPoint{}, err
	}
	at := startPoint{of: total, fresh: true, over: true}
	if cfg.checkpointEvery == 0 {
		at.why = "no checkpoint: -checkpoint-every 0"
		return nil, at, nil
	}
	if cfg.fresh {
		if err := os.Remove(cfg.checkpoint); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, at, fmt.Errorf("etl: -fresh: %w", err)
		}
	}
	input, err := filepath.Abs(cfg.input)
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
	switch {
	case cfg.fresh:
		at.why = "-fresh"
	case pos == nil && (of == nil || string(of) == input):
		// The first run, or one killed before its first save: it goes on
		// with the dead letters of the killed one.
		at.why, at.over = "no checkpoint yet", false
	case string(of) != input:
		// The position is of another file: start this one over, and forget
		// it, so that the pipeline does not resume there.
		at.why = fmt.Sprintf("the checkpoint was of %s", of)
		if err := c.close(); err != nil {
			return nil, at, err
		}
		if err := os.Remove(cfg.checkpoint); err != nil {
			return nil, at, err
		}
		if f, err = checkpoint.OpenFile(cfg.checkpoint); err != nil {
			return nil, at, fmt.Errorf("etl: %w", err)
		}
		c = &checkpointFile{f}
	default:
		left, err := rowsAfter(ctx, cfg.input, pos)
		if err != nil {
			return nil, at, errors.Join(fmt.Errorf("etl: the checkpoint %s does not fit %s (run with -fresh to start over): %w", cfg.checkpoint, cfg.input, err), c.close())
		}
		at = startPoint{after: total - left, of: total, why: "checkpoint " + cfg.checkpoint}
		if total < 0 || left < 0 {
			at.after, at.of = 0, -1
		}
		return c, at, nil
	}
	if err := f.Save(ctx, pipelineName, inputKey, []byte(input)); err != nil {
		return nil, at, errors.Join(err, c.close())
	}
	return c, at, nil
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
