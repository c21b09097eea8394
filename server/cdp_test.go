//go:build linux

package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// browser is headless chromium driven through the Chrome DevTools
// Protocol over --remote-debugging-pipe: chromium reads NUL-terminated
// JSON commands on its fd 3 and writes answers and events on its fd 4.
// One tab (a target attached with flatten, so its commands carry a
// sessionId) is enough for the tests. Safe for use by one goroutine; the
// reader goroutine hands answers over by id.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      *os.File // our end of chromium's fd 3
	session string   // the tab's CDP session

	// mu guards next, waiting and dead.
	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpAnswer
	dead    error // set when the pipe from chromium ends
}

type cdpAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser runs headless chromium with a fresh profile and a
// width×height window, opens one blank tab and attaches to it. Chromium
// runs in its own process group, killed as a whole at the test's end or
// when the test binary dies.
func startBrowser(t *testing.T, bin string, width, height int) *browser {
	t.Helper()
	// chromium's fd 3 (it reads) and fd 4 (it writes)
	chrIn, ourOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ourIn, chrOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(),
		fmt.Sprintf("--window-size=%d,%d", width, height), "--hide-scrollbars", "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{chrIn, chrOut}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	chrIn.Close()
	chrOut.Close()
	b := &browser{t: t, cmd: cmd, in: ourOut, waiting: map[int]chan cdpAnswer{}}
	done := make(chan struct{})
	go b.read(ourIn, done)
	t.Cleanup(func() {
		b.in.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		ourIn.Close() // a pollable pipe: the reader's Read returns at once
		<-done
		if t.Failed() {
			t.Logf("chromium stderr:\n%s", stderr.String())
		}
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	return b
}

// read hands chromium's answers to their callers until the pipe ends;
// events (messages without an id) are dropped.
func (b *browser) read(r *os.File, done chan struct{}) {
	defer close(done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.dead = fmt.Errorf("chromium's pipe ended: %v", err)
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m struct {
			ID int `json:"id"`
			cdpAnswer
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue
		}
		b.mu.Lock()
		ch := b.waiting[m.ID]
		delete(b.waiting, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.cdpAnswer
		}
	}
}

// cdpTimeout bounds one CDP command. Waits in the page (waitFor) bound
// themselves below it.
const cdpTimeout = 120 * time.Second

// call sends one CDP command (to the tab with session set, else to the
// browser) and decodes its result into out (if non-nil). A CDP error, a
// dead browser or no answer within cdpTimeout fails the test.
func (b *browser) call(session, method string, params, out any) {
	b.t.Helper()
	b.mu.Lock()
	if b.dead != nil {
		b.mu.Unlock()
		b.t.Fatalf("%s: %v", method, b.dead)
	}
	b.next++
	id := b.next
	ch := make(chan cdpAnswer, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params, "sessionId": session})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		b.t.Fatalf("%s: write to chromium: %v", method, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cdpTimeout)
	defer cancel()
	select {
	case a, ok := <-ch:
		if !ok {
			b.t.Fatalf("%s: %v", method, b.dead)
		}
		if a.Error != nil {
			b.t.Fatalf("%s: CDP error %d: %s", method, a.Error.Code, a.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(a.Result, out); err != nil {
				b.t.Fatalf("%s: result %s: %v", method, a.Result, err)
			}
		}
	case <-ctx.Done():
		b.t.Fatalf("%s: no answer from chromium in %v", method, cdpTimeout)
	}
}

// do sends a CDP command to the tab.
func (b *browser) do(method string, params, out any) {
	b.t.Helper()
	b.call(b.session, method, params, out)
}

// eval runs the JavaScript expression js in the page, awaits it if it is
// a promise, and decodes its value (JSON) into out (if non-nil). A thrown
// exception fails the test with its text.
func (b *browser) eval(js string, out any) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.do("Runtime.evaluate", map[string]any{"expression": js, "awaitPromise": true, "returnByValue": true}, &r)
	if r.Exception != nil {
		b.t.Fatalf("page script failed: %s %s\nscript: %s", r.Exception.Text, r.Exception.Exception.Description, js)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			b.t.Fatalf("page script value %s: %v\nscript: %s", r.Result.Value, err, js)
		}
	}
}

// waitFor evaluates the expression cond in the page every 50 ms until it
// is truthy and decodes that value into out (if non-nil). It fails the
// test, naming what, when cond is still falsy after 60 s: a deadline
// for a page that never gets there, not a measure of its speed. The
// polling runs in the page, so nothing here sleeps.
func (b *browser) waitFor(what, cond string, out any) {
	b.t.Helper()
	js := `new Promise((resolve, reject) => {
  const t0 = Date.now();
  const poll = () => {
    let v, err;
    try { v = (` + cond + `); } catch (e) { err = e; }
    if (v) return resolve(v);
    if (Date.now() - t0 > 60000) {
      const s = document.getElementById("status");
      return reject(new Error("timed out waiting" + (err ? " (" + err.message + ")" : "") + "; status: " + (s ? s.textContent : "")));
    }
    setTimeout(poll, 50);
  };
  poll();
})`
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.do("Runtime.evaluate", map[string]any{"expression": js, "awaitPromise": true, "returnByValue": true}, &r)
	if r.Exception != nil {
		b.t.Fatalf("waiting for %s: %s", what, r.Exception.Exception.Description)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			b.t.Fatalf("waiting for %s: value %s: %v", what, r.Result.Value, err)
		}
	}
}

// navigate opens u in the tab.
func (b *browser) navigate(u string) {
	b.t.Helper()
	var r struct {
		ErrorText string `json:"errorText"`
	}
	b.do("Page.navigate", map[string]any{"url": u}, &r)
	if r.ErrorText != "" {
		b.t.Fatalf("navigate %s: %s", u, r.ErrorText)
	}
}

// typeText types text into the focused element, as a keyboard would
// (Input.insertText: input events, no key codes).
func (b *browser) typeText(text string) {
	b.t.Helper()
	b.do("Input.insertText", map[string]any{"text": text}, nil)
}

// press presses and releases one named key (Enter, Escape, Tab) on the
// focused element.
func (b *browser) press(key string) {
	b.t.Helper()
	codes := map[string]int{"Enter": 13, "Escape": 27, "Tab": 9}
	code, ok := codes[key]
	if !ok {
		b.t.Fatalf("press: no key %q", key)
	}
	down := map[string]any{"type": "keyDown", "key": key, "code": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}
	if key == "Enter" {
		down["text"] = "\r"
	}
	b.do("Input.dispatchKeyEvent", down, nil)
	b.do("Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": key, "code": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}, nil)
}

// screenshot writes the tab's viewport as a PNG to path.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	b.do("Page.captureScreenshot", map[string]any{"format": "png"}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil || len(png) == 0 {
		b.t.Fatalf("screenshot: %d bytes, %v", len(png), err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
