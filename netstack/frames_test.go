package netstack

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func frame(n int, fill byte) []byte { return bytes.Repeat([]byte{fill}, n) }

func qemuWire(frames ...[]byte) []byte {
	var b bytes.Buffer
	for _, f := range frames {
		binary.Write(&b, binary.BigEndian, uint32(len(f)))
		b.Write(f)
	}
	return b.Bytes()
}

// socketpair returns two connected unix stream sockets.
func socketpair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := conv(fds[0]), conv(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestQEMUFramesMergedAndSplit(t *testing.T) {
	a, b := socketpair(t)
	frames := [][]byte{frame(60, 1), frame(1514, 2), frame(14, 3), frame(9000, 4)}
	wire := qemuWire(frames...)
	go func() {
		// First half merged in one write, the rest a byte at a time.
		half := len(wire) / 2
		a.Write(wire[:half])
		for i := half; i < len(wire); i++ {
			a.Write(wire[i : i+1])
		}
	}()
	q := NewQEMUConn(b)
	buf := make([]byte, maxFrame)
	for i, want := range frames {
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := q.ReadFrame(buf)
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Fatalf("frame %d: %d bytes, %v", i, n, err)
		}
	}
	// And back: WriteFrame produces the same wire format.
	go NewQEMUConn(a).WriteFrame(frames[1])
	got := make([]byte, 4+len(frames[1]))
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ioReadFull(b, got); err != nil || !bytes.Equal(got, qemuWire(frames[1])) {
		t.Fatalf("write: %v", err)
	}
}

func ioReadFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestQEMUBadLengthEndsTheLink(t *testing.T) {
	for _, n := range []uint32{0, 13, maxFrame + 1, 0xffffffff} {
		a, b := socketpair(t)
		go a.Write(binary.BigEndian.AppendUint32(nil, n))
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := NewQEMUConn(b).ReadFrame(make([]byte, maxFrame)); !errors.Is(err, errFrameSize) {
			t.Errorf("length %d: %v", n, err)
		}
	}
}

func TestVfkitDatagrams(t *testing.T) {
	dir, _ := os.MkdirTemp("", "vf")
	defer os.RemoveAll(dir)
	guardAddr := &net.UnixAddr{Name: filepath.Join(dir, "guard.sock"), Net: "unixgram"}
	vmAddr := &net.UnixAddr{Name: filepath.Join(dir, "vm.sock"), Net: "unixgram"}
	gc, err := net.ListenUnixgram("unixgram", guardAddr)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := net.ListenUnixgram("unixgram", vmAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	v := NewVfkitConn(gc)
	defer v.Close()
	vm.WriteToUnix([]byte("VFKT"), guardAddr)
	vm.WriteToUnix(frame(5, 9), guardAddr) // runt
	vm.WriteToUnix(frame(1514, 7), guardAddr)
	buf := make([]byte, maxFrame)
	gc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := v.ReadFrame(buf)
	if err != nil || n != 1514 || buf[0] != 7 {
		t.Fatalf("read %d %v", n, err)
	}
	if err := v.WriteFrame(frame(60, 8)); err != nil {
		t.Fatal(err)
	}
	vm.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err = vm.ReadFromUnix(buf)
	if err != nil || n != 60 || buf[0] != 8 {
		t.Fatalf("reply %d %v", n, err)
	}
}

// FuzzQEMUFrames: any byte stream gives whole frames of legal size, or an
// error; never a panic or an oversized frame.
func FuzzQEMUFrames(f *testing.F) {
	f.Add(qemuWire(frame(60, 1), frame(14, 2)))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, wire []byte) {
		q := &QEMUConn{r: bufioReader(wire)}
		buf := make([]byte, 2048)
		for range 64 {
			n, err := q.ReadFrame(buf)
			if err != nil {
				return
			}
			if n < 14 || n > len(buf) {
				t.Fatalf("frame of %d bytes", n)
			}
		}
	})
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
