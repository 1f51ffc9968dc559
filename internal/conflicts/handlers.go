package conflicts

import (
	"fmt"
	"slices"

	"k8s.io/client-go/tools/cache"
)

// NodeHandlers are the event handlers of the node informer: each calls
// changed with the addresses that came, went or changed hands, whose
// holders' conflicts may have changed. Heartbeats, images and conditions
// change nothing the check reads, and call nothing.
func NodeHandlers(changed func(addrs ...[]string)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*NodeInfo); ok {
				changed(n.Addresses)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*NodeInfo)
			cur, ok2 := newObj.(*NodeInfo)
			if ok1 && ok2 && !slices.Equal(old.Addresses, cur.Addresses) {
				changed(old.Addresses, cur.Addresses)
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := unwrap(obj).(*NodeInfo); ok {
				changed(n.Addresses)
			}
		},
	}
}

// IPAddressHandlers are NodeHandlers for the IPAddress informer.
func IPAddressHandlers(changed func(addrs ...[]string)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if a, ok := obj.(*IPAddressInfo); ok {
				changed([]string{a.Name})
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*IPAddressInfo)
			cur, ok2 := newObj.(*IPAddressInfo)
			if ok1 && ok2 && old.Holder != cur.Holder {
				changed([]string{cur.Name})
			}
		},
		DeleteFunc: func(obj any) {
			if a, ok := unwrap(obj).(*IPAddressInfo); ok {
				changed([]string{a.Name})
			}
		},
	}
}

// unwrap returns the last known object of a deletion the informer learned
// about only by relisting.
func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// Others names the Service (from the IPAddress cache ipAddresses) and the
// Nodes (from the node cache nodes, by AddressIndex) holding addr, as
// conflictsWith names them; either cache may be nil (its check is off).
// The Node the pod runs on, podNode, does not count: a pod that has a
// node to itself, on EKS Fargate say, holds its node's address by design.
func Others(ipAddresses, nodes cache.Indexer, addr, podNode string) ([]string, error) {
	var out []string
	if ipAddresses != nil {
		obj, exists, err := ipAddresses.GetByKey(addr)
		if err != nil {
			return nil, fmt.Errorf("looking up IPAddress %s: %w", addr, err)
		}
		if exists && obj.(*IPAddressInfo).Holder != "" {
			out = append(out, obj.(*IPAddressInfo).Holder)
		}
	}
	if nodes != nil {
		nodeKeys, err := nodes.IndexKeys(AddressIndex, addr)
		if err != nil {
			return nil, fmt.Errorf("looking up the nodes holding %s: %w", addr, err)
		}
		for _, k := range nodeKeys {
			if k != podNode {
				out = append(out, HolderNode+" "+k)
			}
		}
	}
	return out, nil
}
