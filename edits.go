package main

import (
	"hash/maphash"
	"strconv"
	"sync"

	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/slim"
)

// When the controller changes or removes a mirror, the trail repeats what
// the mirror said (the addresses released, the addresses before a change),
// so the controller must know whether that content is its own. The
// mirror's managedFields cannot tell: any writer may send them and the API
// server keeps them, so a forger can both pass as the controller and blame
// someone else. What the controller does know is what it wrote: it keeps a
// fingerprint of the answer fields of its last write of each mirror (and of
// a write whose outcome it did not learn). A cached mirror that matches is
// its own, whatever labels, annotations or finalizers users changed since;
// one that does not was edited by someone else (docs/trail.md, "reverted").
//
// A mirror it has not written since it started (after a restart or a
// failover) is its own when its content is what the pod says now, and when
// the admission policy is bound: nobody else can then change those fields.
// Otherwise what it says is the object's claim, and the trail says so
// (unverified).

// authorship is what the controller can prove about who wrote a mirror's
// answer fields.
type authorship int

const (
	// ownWrite: the controller's own write, or the pod's truth.
	ownWrite authorship = iota
	// edited: not what the controller last wrote.
	edited
	// unverified: not written by this process, and not guarded by the
	// admission policy.
	unverified
)

// authors remembers the controller's own writes of mirrors, by key.
type authors struct {
	mu sync.Mutex
	m  map[cache.ObjectName]written
}

// written is what the controller last wrote to one mirror: the
// fingerprints of the last write it saw succeed and of the last it sent,
// which differ while a write's outcome is unknown (a timeout, a lost
// response); uid is the mirror's, zero until a write returned it.
type written struct {
	uid  slim.UID
	sums [2]uint64
}

func newAuthors() *authors {
	return &authors{m: map[cache.ObjectName]written{}}
}

// of says who wrote have's answer fields. bound is whether the admission
// policy is in force.
func (a *authors) of(key cache.ObjectName, have *mirrorInfo, bound bool) authorship {
	a.mu.Lock()
	w, ok := a.m[key]
	a.mu.Unlock()
	switch {
	case ok && (w.uid == slim.UID{} || w.uid == have.UID):
		if s := have.fingerprint(); s == w.sums[0] || s == w.sums[1] {
			return ownWrite
		}
		return edited
	case bound:
		return ownWrite
	default:
		return unverified
	}
}

// adopt records have, whose answer fields are what its pod says now, as
// the controller's own when it has no record of the mirror.
func (a *authors) adopt(key cache.ObjectName, have *mirrorInfo) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w, ok := a.m[key]; ok && w.uid == have.UID {
		return
	}
	s := have.fingerprint()
	a.m[key] = written{uid: have.UID, sums: [2]uint64{s, s}}
}

// sending records a write of want, before it is sent: if its response is
// lost, the object it made is still recognized.
func (a *authors) sending(key cache.ObjectName, want *PodToIp) {
	s := want.fingerprint()
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.m[key]
	if !ok {
		w.sums[0] = s
	}
	w.sums[1] = s
	a.m[key] = w
}

// wrote records the success of the write of want that made the object uid.
func (a *authors) wrote(key cache.ObjectName, uid slim.UID, want *PodToIp) {
	s := want.fingerprint()
	a.mu.Lock()
	a.m[key] = written{uid: uid, sums: [2]uint64{s, s}}
	a.mu.Unlock()
}

// forget drops the record of key's mirror uid once it is gone; a record of
// a newer mirror under the same name stays.
func (a *authors) forget(key cache.ObjectName, uid slim.UID) {
	a.mu.Lock()
	if w, ok := a.m[key]; ok && (w.uid == uid || w.uid == slim.UID{}) {
		delete(a.m, key)
	}
	a.mu.Unlock()
}

// fingerprintSeed keys the fingerprints; they never leave the process.
var fingerprintSeed = maphash.MakeSeed()

// answer is the part of a mirror that states a hold: what the admission
// policy lets only the controller write, and what the trail repeats.
type answer struct {
	podName, podUID, podAddress string
	podIPs                      []string
	podIPv4, podIPv6, nodeName  string
	hostNetwork, terminating    bool
	conflict                    bool
	conflictsWith               []string
}

func (f answer) sum() uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	for _, s := range []string{f.podName, f.podUID, f.podAddress, f.podIPv4, f.podIPv6, f.nodeName} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	for _, list := range [][]string{f.podIPs, f.conflictsWith} {
		h.WriteString(strconv.Itoa(len(list)))
		for _, s := range list {
			h.WriteByte(0)
			h.WriteString(s)
		}
		h.WriteByte(0)
	}
	for _, b := range []bool{f.hostNetwork, f.terminating, f.conflict} {
		if b {
			h.WriteByte(1)
		} else {
			h.WriteByte(0)
		}
	}
	return h.Sum64()
}

func (m *PodToIp) fingerprint() uint64 {
	return answer{
		podName: m.PodName, podUID: string(m.PodUID), podAddress: m.PodAddress, podIPs: m.PodIPs,
		podIPv4: m.PodIPv4, podIPv6: m.PodIPv6, nodeName: m.NodeName,
		hostNetwork: m.HostNetwork, terminating: m.Terminating, conflict: m.Conflict, conflictsWith: m.ConflictsWith,
	}.sum()
}

func (m *mirrorInfo) fingerprint() uint64 {
	return answer{
		podName: m.podName(), podUID: string(m.PodUID.UID()), podAddress: m.podAddress(), podIPs: m.PodIPs,
		podIPv4: m.podIPv4(), podIPv6: m.podIPv6(), nodeName: m.NodeName,
		hostNetwork: m.HostNetwork, terminating: m.Terminating, conflict: m.Conflict, conflictsWith: m.conflictsWith(),
	}.sum()
}
