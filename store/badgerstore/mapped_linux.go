package badgerstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// residentFileBytes returns the process's RssFile (/proc/self/status).
func residentFileBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("RssFile:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("RssFile in /proc/self/status: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no RssFile in /proc/self/status")
}

// pageOutMappings advises the kernel to page out every mapping
// pageOutTargets selects in /proc/self/maps.
func pageOutMappings(dir string) error {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	targets, err := pageOutTargets(dir, f)
	if err != nil {
		return err
	}
	for _, m := range targets {
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_PAGEOUT)
		switch errno {
		case 0, unix.ENOMEM: // ENOMEM: unmapped since the listing
		default:
			return fmt.Errorf("madvise %s: %w", m.path, errno)
		}
	}
	return nil
}

// mapping is one line of /proc/self/maps: an address range and the file
// mapped there.
type mapping struct {
	start, end uintptr
	path       string
}

// pageOutTargets returns the mappings, listed as in /proc/self/maps, of
// the files in dir that are value-log files other than the newest (the
// one badger writes) or LSM tables (.sst).
func pageOutTargets(dir string, maps io.Reader) ([]mapping, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	var all []mapping
	newest := ""
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		path := strings.Join(fields[5:], " ")
		if filepath.Dir(path) != dir {
			continue
		}
		ext := filepath.Ext(path)
		if ext != ".vlog" && ext != ".sst" {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			continue
		}
		all = append(all, mapping{uintptr(start), uintptr(end), path})
		// Value-log files are numbered, zero-padded: the greatest name is
		// the newest.
		if ext == ".vlog" && path > newest {
			newest = path
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	targets := all[:0]
	for _, m := range all {
		if m.path != newest {
			targets = append(targets, m)
		}
	}
	return targets, nil
}
