package netstack

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// GatewayMAC is the gateway's link address: locally administered, and not
// a host interface's own, so that on a veth the host kernel treats the VM's
// frames as someone else's and never routes them itself.
func GatewayMAC() net.HardwareAddr { return net.HardwareAddr{0x02, 0x67, 0x75, 0x61, 0x72, 0x64} }

// FrameConn carries whole Ethernet frames to and from a VM.
type FrameConn interface {
	// ReadFrame reads one frame into buf and returns its length.
	ReadFrame(buf []byte) (int, error)
	WriteFrame(frame []byte) error
	Close() error
}

// maxFrame bounds a frame: the largest MTU offered plus the Ethernet header.
const maxFrame = 65535 + header.EthernetMinimumSize

var errFrameSize = errors.New("frame length out of range")

// QEMUConn speaks QEMU's stream netdev (-netdev stream, and socket): each
// frame is preceded by its length, 4 bytes big-endian. Reads may merge or
// split frames; the codec does not care.
type QEMUConn struct {
	c   net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
}

// NewQEMUConn wraps a connected stream.
func NewQEMUConn(c net.Conn) *QEMUConn {
	return &QEMUConn{c: c, r: bufio.NewReaderSize(c, 256<<10)}
}

func (q *QEMUConn) ReadFrame(buf []byte) (int, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(q.r, hdr[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < header.EthernetMinimumSize || n > len(buf) || n > maxFrame {
		// The stream has lost its framing, or the peer is hostile: there is
		// no way to resynchronize, so the link ends.
		return 0, fmt.Errorf("qemu link: %w: %d", errFrameSize, n)
	}
	return io.ReadFull(q.r, buf[:n])
}

func (q *QEMUConn) WriteFrame(frame []byte) error {
	if len(frame) > maxFrame {
		return errFrameSize
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
	q.wmu.Lock()
	defer q.wmu.Unlock()
	bufs := net.Buffers{hdr[:], frame}
	_, err := bufs.WriteTo(q.c)
	return err
}

func (q *QEMUConn) Close() error { return q.c.Close() }

// VfkitConn speaks vfkit's and Virtualization.framework's unixgram link: one
// frame per datagram. The peer's address is learnt from its first datagram;
// a legacy "VFKT" hello is skipped.
type VfkitConn struct {
	c    *net.UnixConn
	mu   sync.Mutex
	peer *net.UnixAddr
	seen chan struct{} // closed once the peer is known
	once sync.Once
}

// NewVfkitConn wraps a bound unixgram socket, with the large buffers the
// frame rate needs.
func NewVfkitConn(c *net.UnixConn) *VfkitConn {
	c.SetReadBuffer(4 << 20)
	c.SetWriteBuffer(1 << 20)
	return &VfkitConn{c: c, seen: make(chan struct{})}
}

func (v *VfkitConn) ReadFrame(buf []byte) (int, error) {
	for {
		n, from, err := v.c.ReadFromUnix(buf)
		if err != nil {
			return 0, err
		}
		if from != nil && from.Name != "" {
			v.mu.Lock()
			v.peer = from
			v.mu.Unlock()
			v.once.Do(func() { close(v.seen) })
		}
		if n == 4 && string(buf[:4]) == "VFKT" {
			continue
		}
		if n < header.EthernetMinimumSize {
			continue // runt: drop it, the next datagram is whole again
		}
		return n, nil
	}
}

func (v *VfkitConn) WriteFrame(frame []byte) error {
	<-v.seen
	v.mu.Lock()
	peer := v.peer
	v.mu.Unlock()
	_, err := v.c.WriteToUnix(frame, peer)
	return err
}

func (v *VfkitConn) Close() error {
	v.once.Do(func() { close(v.seen) })
	return v.c.Close()
}

// FrameEndpoint is a gVisor link endpoint over a FrameConn: an Ethernet
// layer on a channel endpoint, pumped both ways by Run.
type FrameEndpoint struct {
	stack.LinkEndpoint
	ch *channel.Endpoint
	fc FrameConn
}

// NewFrameEndpoint makes the endpoint; call Run to move frames.
func NewFrameEndpoint(fc FrameConn, mtu uint32, mac net.HardwareAddr) *FrameEndpoint {
	ch := channel.New(4096, mtu, tcpip.LinkAddress(mac))
	return &FrameEndpoint{LinkEndpoint: ethernet.New(ch), ch: ch, fc: fc}
}

// Run moves frames until ctx ends or the link fails.
func (e *FrameEndpoint) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		e.fc.Close()
	}()
	errc := make(chan error, 1)
	go func() {
		for {
			pkt := e.ch.ReadContext(ctx)
			if pkt == nil {
				errc <- nil
				return
			}
			v := pkt.ToView()
			err := e.fc.WriteFrame(v.AsSlice())
			v.Release()
			pkt.DecRef()
			if err != nil {
				cancel()
				errc <- err
				return
			}
		}
	}()
	buf := make([]byte, maxFrame)
	var readErr error
	for {
		n, err := e.fc.ReadFrame(buf)
		if err != nil {
			readErr = err
			break
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append([]byte(nil), buf[:n]...))})
		e.ch.InjectInbound(0, pkt)
		pkt.DecRef()
	}
	cancel()
	werr := <-errc
	if ctx.Err() != nil && (errors.Is(readErr, net.ErrClosed) || errors.Is(readErr, io.EOF)) {
		return werr
	}
	if errors.Is(readErr, io.EOF) {
		return errors.New("the VM closed its link")
	}
	return readErr
}
