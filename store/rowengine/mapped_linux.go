package rowengine

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// pageOutMappings advises the kernel to page out the mappings
// pageOutTargets selects in /proc/self/smaps to free need bytes.
func pageOutMappings(dir string, need int64) error {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return err
	}
	defer f.Close()
	targets, err := pageOutTargets(dir, f, need)
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

// mapping is one mapping of /proc/self/smaps: an address range, the file
// mapped there and how many of its bytes are resident.
type mapping struct {
	start, end uintptr
	path       string
	rss        int64
}

// pageOutTargets returns, from a listing in the format of
// /proc/self/smaps, the resident mappings of the files in dir that are
// value-log files other than the newest (the one badger writes) or LSM
// tables (.sst), until their resident bytes add up to need: the value-log
// files first, oldest first, whose blocks the fewest reads still want (a
// tailing consumer reads the newest), then the tables, which every late
// point's look-up and every drain's block look-up reads.
func pageOutTargets(dir string, smaps io.Reader, need int64) ([]mapping, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	var all []mapping
	cur := -1 // all's index of the mapping whose fields are being read
	newest := ""
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.HasSuffix(fields[0], ":") { // a field of the mapping above: "Rss: 12 kB"
			if cur >= 0 && fields[0] == "Rss:" && len(fields) >= 2 {
				kb, err := strconv.ParseInt(fields[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("smaps Rss of %s: %w", all[cur].path, err)
				}
				all[cur].rss = kb << 10
			}
			continue
		}
		// start-end perms offset dev inode path
		cur = -1
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
		all = append(all, mapping{start: uintptr(start), end: uintptr(end), path: path})
		cur = len(all) - 1
		// Value-log files are numbered, zero-padded: the greatest name is
		// the newest.
		if ext == ".vlog" && path > newest {
			newest = path
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Value-log files before tables, each kind oldest (lowest number) first.
	slices.SortStableFunc(all, func(a, b mapping) int {
		return cmp.Or(-cmp.Compare(filepath.Ext(a.path), filepath.Ext(b.path)), cmp.Compare(a.path, b.path))
	})
	var targets []mapping
	for _, m := range all {
		if need <= 0 {
			break
		}
		if m.path == newest || m.rss == 0 {
			continue
		}
		targets = append(targets, m)
		need -= m.rss
	}
	return targets, nil
}
