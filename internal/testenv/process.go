package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// process is the running server of a Redis or Postgres.
type process struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	kill func(*exec.Cmd)
}

// launch starts cmd, whose log out prints ready once the server accepts
// connections, and waits for that line (at most startTimeout). kill ends
// the server (Kill, and a start that timed out).
func (p *process) launch(cmd *exec.Cmd, out io.Reader, name, ready string, kill func(*exec.Cmd)) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	readyc := make(chan error, 1)
	go func() {
		var log strings.Builder
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if !signalled {
				log.WriteString(line + "\n")
				if strings.Contains(line, ready) {
					readyc <- nil
					signalled = true
				}
			}
		}
		if !signalled {
			readyc <- fmt.Errorf("%s exited before it was ready:\n%s", name, log.String())
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case err := <-readyc:
		if err != nil {
			<-done
			return err
		}
	case <-time.After(startTimeout):
		kill(cmd)
		<-done
		return fmt.Errorf("%s not ready after %v", name, startTimeout)
	}
	p.mu.Lock()
	p.cmd, p.done, p.kill = cmd, done, kill
	p.mu.Unlock()
	return nil
}

// Kill stops the server at once and waits for it to exit. It is safe to call
// more than once.
func (p *process) Kill() {
	p.mu.Lock()
	cmd, done, kill := p.cmd, p.done, p.kill
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	kill(cmd)
	<-done
}
