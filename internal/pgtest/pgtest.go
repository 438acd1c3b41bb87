// Package pgtest starts a throwaway PostgreSQL server (initdb + pg_ctl in a
// temp dir) for tests that must talk to a real database. As root it runs the
// server as the postgres user, since PostgreSQL refuses to run as root.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// Server is a running PostgreSQL.
type Server struct {
	dir, bin string
	host     string
	port     int
	asUser   string
	dbs      atomic.Int64
}

// findBin locates the server programs: PATH, then Debian's versioned dirs.
func findBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("PostgreSQL server programs (initdb, pg_ctl) not found: install Debian's postgresql-15 (.ci/run does) or put them on PATH")
}

func (s *Server) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.asUser != "" {
		return exec.Command("runuser", append([]string{"-u", s.asUser, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// Start initialises and starts a server on a free loopback port.
func Start() (*Server, error) { return StartAt("127.0.0.1") }

// StartAt starts a server listening on host (an IP address of this
// machine) at a free port, trusting clients from 127.0.0.1 and from each of
// allow (CIDRs, e.g. a cluster's pod network).
func StartAt(host string, allow ...string) (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, host: host}
	if os.Geteuid() == 0 {
		s.asUser = "postgres"
	}
	if s.dir, err = os.MkdirTemp("", "promptops-pg-"); err != nil {
		return nil, err
	}
	if s.asUser != "" {
		u, err := user.Lookup(s.asUser)
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(s.dir, uid, gid); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(s.dir, "data")
	if out, err := s.cmd("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if len(allow) > 0 {
		hba := ""
		for _, cidr := range allow {
			hba += fmt.Sprintf("host all all %s trust\n", cidr)
		}
		f, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(hba)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			s.Stop()
			return nil, err
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50", s.port, s.dir, host)
	if out, err := s.cmd("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.Stop()
		return nil, fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return s, nil
}

// DSN of a database on the server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort(s.host, strconv.Itoa(s.port)), db)
}

// NewDatabase creates an empty database and returns its DSN.
func (s *Server) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d", s.dbs.Add(1))
	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.DSN(name), nil
}

// Freeze stops the server's processes (SIGSTOP to the postmaster and its
// children): connections stay open and every query hangs, as on a store
// that stopped answering. thaw lets them go on.
func (s *Server) Freeze() (thaw func(), err error) {
	pidFile, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid"))
	if err != nil {
		return nil, err
	}
	first, _, _ := strings.Cut(string(pidFile), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return nil, fmt.Errorf("postmaster.pid: %w", err)
	}
	pids := []int{pm}
	if out, err := exec.Command("pgrep", "-P", strconv.Itoa(pm)).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, err
		}
	}
	return func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}, nil
}

// Stop stops the server and removes its files; it may be called again.
func (s *Server) Stop() {
	if s.port != 0 {
		out, err := s.cmd("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop").CombinedOutput()
		if err != nil && !strings.Contains(string(out), "not running") {
			fmt.Fprintf(os.Stderr, "pgtest: stopping: %v %s\n", err, out)
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
	s.port, s.dir = 0, "" // a second Stop does nothing
}
