//go:build linux

package nvme

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// maxRetries bounds the resubmissions of one read after -EAGAIN or -EINTR.
const maxRetries = 1000

// ringBatch reads reqs through the ring with the pread engine's semantics
// (window, short reads continued, the same errors): up to the ring's size
// in flight, new reads and resubmissions entered together, each completion
// handled as it arrives.
func (r *Reader) ringBatch(reqs []Req) {
	type state struct {
		a0    int64
		dst   []byte
		got   int // bytes of dst read
		tries int // resubmissions after -EAGAIN/-EINTR
	}
	st := make([]state, len(reqs))
	todo := make([]int, 0, len(reqs))
	for i := range reqs {
		q := &reqs[i]
		q.Data, q.Err = nil, nil
		a0, dst, err := r.window(q.Buf, q.Off, q.N)
		switch {
		case err != nil:
			q.Err = err
		case len(dst) == 0:
			q.Data, q.Err = r.finish(q.Buf, q.Off, q.N, a0, 0)
		default:
			st[i].a0, st[i].dst = a0, dst
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return
	}
	// the kernel writes into the buffers after this goroutine handed it
	// their addresses: pinned, they can neither move nor be freed
	var pin runtime.Pinner
	defer pin.Unpin()
	rg := r.ring
	ch := make(chan completion, min(len(todo), rg.entries))
	w := &waiter{ch: ch}
	owner := make(map[uint32]int, cap(ch)) // slot -> index in reqs
	queue := make([]sqeRead, 0, cap(ch))
	done := func(slot uint32, i int, data []byte, err error) {
		reqs[i].Data, reqs[i].Err = data, err
		delete(owner, slot)
		rg.release(slot)
	}
	inflight, next := 0, 0
	for next < len(todo) || inflight > 0 || len(queue) > 0 {
		// new reads, as many as there are free slots; block for one only
		// when nothing of this batch is in flight
		for next < len(todo) {
			slot, ok, err := rg.acquire(w, inflight+len(queue) == 0)
			if err != nil {
				for _, i := range todo[next:] {
					reqs[i].Err = fmt.Errorf("nvme: %s: reading [%d, %d): %w", r.path, reqs[i].Off, reqs[i].Off+reqs[i].N, err)
				}
				next = len(todo)
				break
			}
			if !ok {
				break
			}
			i := todo[next]
			next++
			owner[slot] = i
			pin.Pin(&st[i].dst[0])
			queue = append(queue, sqeRead{slot: slot, dst: st[i].dst, pos: st[i].a0})
		}
		if len(queue) > 0 {
			taken, err := rg.submit(queue)
			for _, q := range queue[taken:] {
				i := owner[q.slot]
				done(q.slot, i, nil, r.fail(reqs[i].Off, reqs[i].N, err))
			}
			inflight += taken
			queue = queue[:0]
		}
		if inflight == 0 {
			continue
		}
		c := <-ch
		inflight--
		i := owner[c.slot]
		s, q := &st[i], &reqs[i]
		switch {
		case c.res == -int32(unix.EAGAIN) || c.res == -int32(unix.EINTR):
			if s.tries++; s.tries > maxRetries {
				done(c.slot, i, nil, r.fail(q.Off, q.N, unix.Errno(-c.res)))
				continue
			}
		case c.res < 0:
			done(c.slot, i, nil, r.fail(q.Off, q.N, unix.Errno(-c.res)))
			continue
		case c.res == 0: // end of file: fine if the wanted range is covered
			data, err := r.finish(q.Buf, q.Off, q.N, s.a0, s.got)
			done(c.slot, i, data, err)
			continue
		default:
			prev := s.got
			s.got += int(c.res)
			if s.got >= len(s.dst) || s.a0+int64(s.got) >= q.Off+q.N {
				data, err := r.finish(q.Buf, q.Off, q.N, s.a0, s.got)
				done(c.slot, i, data, err)
				continue
			}
			if r.direct && s.got%Align != 0 {
				// a short O_DIRECT read inside the range: the next one
				// must start aligned, so some bytes are read again
				s.got &^= Align - 1
				if s.got <= prev {
					data, err := r.finish(q.Buf, q.Off, q.N, s.a0, s.got)
					done(c.slot, i, data, err)
					continue
				}
			}
		}
		// the rest of the range (or all of it again), in the same slot
		queue = append(queue, sqeRead{slot: c.slot, dst: s.dst[s.got:], pos: s.a0 + int64(s.got)})
	}
}
