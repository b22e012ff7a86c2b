package badgerstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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

// pageOutMappings advises the kernel to page out every mapping of a file
// in dir that is a value-log file other than the newest (the one badger
// writes) or an LSM table (.sst), as /proc/self/maps lists them.
func pageOutMappings(dir string) error {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	type mapping struct {
		start, end uintptr
		path       string
	}
	var maps []mapping
	newest := ""
	sc := bufio.NewScanner(f)
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
		maps = append(maps, mapping{uintptr(start), uintptr(end), path})
		// Value-log files are numbered, zero-padded: the greatest name is
		// the newest.
		if ext == ".vlog" && path > newest {
			newest = path
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, m := range maps {
		if m.path == newest {
			continue
		}
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_PAGEOUT)
		switch errno {
		case 0, unix.ENOMEM: // ENOMEM: unmapped since the listing
		default:
			return fmt.Errorf("madvise %s: %w", m.path, errno)
		}
	}
	return nil
}
