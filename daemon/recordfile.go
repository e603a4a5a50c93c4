package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/autoshape/autoshape/controller"
	"go.uber.org/zap"
)

// An AppendFile is a decision file opened for appending and reading; an
// *os.File from OpenAppend is one. Tests stand in for it to fill the disk.
type AppendFile interface {
	io.Writer
	io.ReaderAt
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Close() error
}

// OpenAppend opens (or creates) path for appending and reading.
func OpenAppend(path string) (AppendFile, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
}

// RecordFileConfig says where a RecordFile writes.
type RecordFileConfig struct {
	// Path is the file; "" writes nothing.
	Path string
	// MaxBytes rotates the file to Path+".1" before a record when it has
	// reached this size; 0 never rotates.
	MaxBytes int64
	// Logger gets the lines about records that could not be written; nil
	// logs nothing.
	Logger *zap.Logger
	// Now is the clock that spaces those lines; nil is time.Now.
	Now func() time.Time
	// Open opens the file for every record; nil is OpenAppend.
	Open func(path string) (AppendFile, error)
}

// A RecordFile appends decision records as JSON lines (the input of
// `autoshape-tools plot`) and rotates the file. Every record is a whole line or
// nothing: a write cut short (a full disk) is truncated back to the end of
// the last whole line, and a torn line at the end of the file (a crash in
// mid-write) is cut off before the next record, so one bad moment never
// spoils the file. The file is opened for every record, so one that was
// moved or deleted is made again. Records that could not be written are
// counted: a WARN line at the first failure, then at most one a minute with
// the number dropped, and an INFO line when writing works again.
//
// It is safe for concurrent use. Links that write to the same file must
// share one RecordFile, so that their rotations cannot race.
type RecordFile struct {
	mu       sync.Mutex
	path     string
	maxBytes int64
	log      *zap.Logger
	now      func() time.Time
	open     func(path string) (AppendFile, error)

	failing bool
	dropped int       // records lost since the last line about them
	warned  time.Time // when the last WARN line was written
}

// NewRecordFile returns a RecordFile as cfg says. It touches no file
// before the first record.
func NewRecordFile(cfg RecordFileConfig) *RecordFile {
	f := &RecordFile{path: cfg.Path, maxBytes: cfg.MaxBytes, log: cfg.Logger, now: cfg.Now, open: cfg.Open}
	if f.log == nil {
		f.log = zap.NewNop()
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.open == nil {
		f.open = OpenAppend
	}
	return f
}

// Configure changes the file and its size limit from the next record on
// (a reloaded configuration).
func (f *RecordFile) Configure(path string, maxBytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if path != f.path && f.failing {
		f.log.Info("no longer writing to the decision file", zap.String("path", f.path), zap.Int("dropped_records", f.dropped))
		f.failing, f.dropped = false, 0
	}
	f.path, f.maxBytes = path, maxBytes
}

// Write appends d as one line. An error means that the record is not in
// the file, and that the file still ends with a whole line (or is cut back
// to one before the next record).
func (f *RecordFile) Write(d controller.Decision) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.path == "" {
		return nil
	}
	line, err := json.Marshal(d.Record())
	if err != nil {
		return err
	}
	line = append(line, '\n')
	err = f.append(line)
	f.account(err)
	return err
}

// append writes line at the end of the file, rotating it first when it
// is full.
func (f *RecordFile) append(line []byte) error {
	file, size, err := f.openWhole()
	if err != nil {
		return err
	}
	if f.maxBytes > 0 && size >= f.maxBytes {
		file.Close()
		if err := os.Rename(f.path, f.path+".1"); err != nil {
			return fmt.Errorf("failed to rotate the decision file: %w", err)
		}
		if file, size, err = f.openWhole(); err != nil {
			return err
		}
	}
	n, err := file.Write(line)
	if err == nil && n < len(line) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("failed to write to the decision file %q: %w", f.path, err)
		if n > 0 {
			// Shrinking takes no space: cut the part that got written.
			if terr := file.Truncate(size); terr != nil {
				err = fmt.Errorf("%w (and failed to cut the torn line, which the next record cuts: %v)", err, terr)
			}
		}
		file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("failed to write to the decision file %q: %w", f.path, err)
	}
	return nil
}

// openWhole opens the file and cuts a torn line off its end. It returns
// the file and its size.
func (f *RecordFile) openWhole() (AppendFile, int64, error) {
	file, err := f.open(f.path)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to open the decision file: %w", err)
	}
	fail := func(err error) (AppendFile, int64, error) {
		file.Close()
		return nil, 0, fmt.Errorf("failed to read the decision file %q: %w", f.path, err)
	}
	st, err := file.Stat()
	if err != nil {
		return fail(err)
	}
	size := st.Size()
	whole, err := wholeLines(file, size)
	if err != nil {
		return fail(err)
	}
	if whole < size {
		if err := file.Truncate(whole); err != nil {
			return fail(fmt.Errorf("failed to cut a torn line at its end: %w", err))
		}
	}
	return file, whole, nil
}

// wholeLines returns the length of the whole lines among the first size
// bytes of r: the offset just past its last newline, 0 when it has none.
func wholeLines(r io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, 4096)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := r.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// account counts a record that could not be written and says so, at most
// once a minute; after failures, a success says that they are over.
func (f *RecordFile) account(err error) {
	if err == nil {
		if f.failing {
			f.log.Info("writing the decision file again", zap.String("path", f.path), zap.Int("dropped_records", f.dropped))
		}
		f.failing, f.dropped = false, 0
		return
	}
	f.dropped++
	now := f.now()
	if !f.failing || now.Sub(f.warned) >= time.Minute {
		f.log.Warn("failed to write the decision file: dropping records (said at most once a minute)",
			zap.String("path", f.path), zap.Int("dropped_records", f.dropped), zap.Error(err))
		f.warned, f.dropped = now, 0
	}
	f.failing = true
}
