package network

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Everything here is on the host: a sandbox's root can rewrite its own
// namespace, eth0's qdiscs included, so a cap there would only be a request.
// Down is a tbf root qdisc on the host end. Up cannot be queued where it
// arrives, and policing it instead (act_police) is both rougher on TCP and
// missing from some kernels (cls_matchall too), so an ingress u32 filter
// redirects everything the host end receives to an ifb device with a tbf
// of its own; ifb hands each packet back to the stack as received on the
// host end, so routing, rp_filter and the firewall's iifname matches see
// no difference.
const (
	// ifbNamePrefix replaces HostNamePrefix in the name of the ifb device
	// that shapes a host end's ingress: asb-x is shaped by ifb-x. It does
	// not start with HostNamePrefix, so the firewall never mistakes it for
	// a sandbox link.
	ifbNamePrefix = "ifb-"

	// ifbAliasPrefix starts the alias of a sandbox's ifb; the host end's
	// name follows. An ifb without it is not ours and is left alone.
	ifbAliasPrefix = "agent-sandbox-ifb:"

	// minRate, in bit/s, keeps the tbf bucket (sent as a time in 64 ns
	// ticks) inside 32 bits.
	minRate = 8000

	// burstTime is the burst allowed at the cap. minBurst floors it: at
	// low caps 10 ms is a handful of packets, while TCP hands the veth
	// GSO packets of up to 64 KiB.
	burstTime = 10 * time.Millisecond
	minBurst  = 64 << 10

	// queueTime is the queue behind the bucket, in time at the cap: long
	// enough that TCP's backoff after a tail drop leaves the link busy,
	// short enough not to add much latency.
	queueTime = 50 * time.Millisecond
)

var (
	shaperHandle  = netlink.MakeHandle(1, 0)
	ingressHandle = netlink.MakeHandle(0xffff, 0)
	// redirectHandle is u32's 800::800, the first node of the root hash
	// table, so that a second call replaces the filter instead of adding
	// one.
	redirectHandle = uint32(0x800<<20 | 0x800)
)

// ifbName returns the name of the ifb device that shapes host end hostIf's
// ingress (SetBandwidth's Up cap).
func ifbName(hostIf string) string {
	return ifbNamePrefix + strings.TrimPrefix(hostIf, HostNamePrefix)
}

// SetBandwidth replaces the caps on sandbox host end hostIf; a zero
// direction removes that direction's cap, and calling it again with the
// same caps changes nothing. Down is shaped by a tbf root qdisc on hostIf,
// Up by a tbf on an ifb device (hostIf with "ifb-" for "asb-"), which
// SetBandwidth creates and, when Up goes back to 0, deletes. Deleting the
// veth does not delete the ifb, so a caller that capped Up removes the cap
// before it detaches. Calls for one interface must not run concurrently.
// On error the caps may be partly applied; calling again converges.
func SetBandwidth(hostIf string, bw Bandwidth) error {
	if err := checkBandwidth(hostIf, bw); err != nil {
		return fmt.Errorf("setting bandwidth of %s: %w", hostIf, err)
	}
	link, err := netlink.LinkByName(hostIf)
	if err != nil {
		return fmt.Errorf("setting bandwidth of %s: finding link: %w", hostIf, err)
	}
	if err := setShaper(link, bw.Down/8); err != nil {
		return fmt.Errorf("setting bandwidth of %s: down: %w", hostIf, err)
	}
	if bw.Up == 0 {
		err = removeIngressShaper(link)
	} else {
		err = setIngressShaper(link, bw.Up/8)
	}
	if err != nil {
		return fmt.Errorf("setting bandwidth of %s: up: %w", hostIf, err)
	}
	return nil
}

func checkBandwidth(hostIf string, bw Bandwidth) error {
	if !strings.HasPrefix(hostIf, HostNamePrefix) || len(hostIf) > 15 || len(hostIf) <= len(HostNamePrefix) {
		return fmt.Errorf("invalid veth name %q", hostIf)
	}
	for _, r := range []uint64{bw.Down, bw.Up} {
		if r != 0 && r < minRate {
			return fmt.Errorf("cap of %d bit/s below the minimum %d", r, minRate)
		}
	}
	return nil
}

// setShaper makes a tbf at rate bytes/s the root qdisc of link, or with
// rate 0 removes it (the link falls back to its default qdisc).
func setShaper(link netlink.Link, rate uint64) error {
	if rate == 0 {
		q, err := findQdisc(link, netlink.HANDLE_ROOT, "tbf")
		if err != nil || q == nil {
			return err
		}
		if err := netlink.QdiscDel(q); err != nil {
			return fmt.Errorf("deleting tbf: %w", err)
		}
		return nil
	}
	burst, limit := tbfSizes(rate)
	tbf := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: link.Attrs().Index,
			Handle:    shaperHandle,
			Parent:    netlink.HANDLE_ROOT,
		},
		Rate:   rate,
		Limit:  limit,
		Buffer: netlink.Xmittime(rate, burst),
	}
	if err := netlink.QdiscReplace(tbf); err != nil {
		return fmt.Errorf("replacing root qdisc with tbf: %w", err)
	}
	return nil
}

// tbfSizes returns the bucket and the queue limit, in bytes, for rate
// bytes/s.
func tbfSizes(rate uint64) (burst, limit uint32) {
	b := max(rate*uint64(burstTime)/uint64(time.Second), minBurst)
	l := b + rate*uint64(queueTime)/uint64(time.Second)
	return uint32(min(b, math.MaxUint32)), uint32(min(l, math.MaxUint32))
}

// setIngressShaper redirects link's ingress to its ifb, shaped at rate
// bytes/s. The ifb is shaped before the redirect exists, so no packet
// passes unshaped once the filter is in.
func setIngressShaper(link netlink.Link, rate uint64) (err error) {
	host := link.Attrs().Name
	ifb, created, err := ensureIFB(host, link.Attrs().MTU)
	if err != nil {
		return err
	}
	if created {
		defer func() {
			if err != nil {
				err = errors.Join(err, DeleteLink(ifb.Attrs().Name))
			}
		}()
	}
	if err := setShaper(ifb, rate); err != nil {
		return fmt.Errorf("shaping %s: %w", ifb.Attrs().Name, err)
	}
	ingress := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: link.Attrs().Index,
		Handle:    ingressHandle,
		Parent:    netlink.HANDLE_INGRESS,
	}}
	if q, err := findQdisc(link, netlink.HANDLE_INGRESS, "ingress"); err != nil {
		return err
	} else if q == nil {
		if err := netlink.QdiscAdd(ingress); err != nil {
			return fmt.Errorf("adding ingress qdisc: %w", err)
		}
	}
	// Every protocol, not just IPv4: a frame that bypassed the filter
	// would bypass the cap.
	redirect := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: link.Attrs().Index,
			Parent:    ingressHandle,
			Handle:    redirectHandle,
			Priority:  1,
			Protocol:  unix.ETH_P_ALL,
		},
		// A nil selector matches every packet.
		Actions: []netlink.Action{netlink.NewMirredAction(ifb.Attrs().Index)},
	}
	if err := netlink.FilterReplace(redirect); err != nil {
		return fmt.Errorf("redirecting ingress to %s: %w", ifb.Attrs().Name, err)
	}
	return nil
}

// ensureIFB returns host end host's ifb, up, creating it if need be.
func ensureIFB(host string, mtu int) (link netlink.Link, created bool, err error) {
	name := ifbName(host)
	alias := ifbAliasPrefix + host
	link, err = netlink.LinkByName(name)
	switch {
	case err == nil:
		if link.Type() != "ifb" || link.Attrs().Alias != alias {
			return nil, false, fmt.Errorf("link %s exists and is not %s's ifb", name, host)
		}
	case errors.As(err, new(netlink.LinkNotFoundError)):
		la := netlink.NewLinkAttrs()
		la.Name = name
		la.MTU = mtu
		if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: la}); err != nil {
			return nil, false, fmt.Errorf("creating ifb %s: %w", name, err)
		}
		created = true
		defer func() {
			if err != nil {
				err = errors.Join(err, DeleteLink(name))
			}
		}()
		if link, err = netlink.LinkByName(name); err != nil {
			return nil, false, fmt.Errorf("finding ifb %s: %w", name, err)
		}
		if err := netlink.LinkSetAlias(link, alias); err != nil {
			return nil, false, fmt.Errorf("setting alias of ifb %s: %w", name, err)
		}
		// Only redirected packets pass an ifb; it needs no addresses.
		if err := WriteSysctl("ipv6/conf/"+name+"/disable_ipv6", "1"); err != nil {
			return nil, false, fmt.Errorf("configuring ifb %s: %w", name, err)
		}
	default:
		return nil, false, fmt.Errorf("finding ifb %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, false, fmt.Errorf("setting ifb %s up: %w", name, err)
	}
	return link, created, nil
}

// removeIngressShaper undoes setIngressShaper. The redirect goes first:
// mirred drops what it cannot deliver, so a filter left pointing at a
// deleted ifb would cut the sandbox off.
func removeIngressShaper(link netlink.Link) error {
	q, err := findQdisc(link, netlink.HANDLE_INGRESS, "ingress")
	if err != nil {
		return err
	}
	if q != nil {
		if err := netlink.QdiscDel(q); err != nil {
			return fmt.Errorf("deleting ingress qdisc: %w", err)
		}
	}
	return deleteIFB(link.Attrs().Name)
}

// deleteIFB deletes host end host's ifb, if there is one of ours. Deleting
// the host end (DetachVeth) leaves the ifb behind, so this is the piece
// a detach must add when Up was capped; the host end must be gone or have
// no redirect to it any more.
func deleteIFB(host string) error {
	name := ifbName(host)
	link, err := netlink.LinkByName(name)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finding ifb %s: %w", name, err)
	}
	if link.Type() != "ifb" || link.Attrs().Alias != ifbAliasPrefix+host {
		return nil
	}
	if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("deleting ifb %s: %w", name, err)
	}
	return nil
}

// findQdisc returns link's qdisc of type kind attached at parent, or nil.
func findQdisc(link netlink.Link, parent uint32, kind string) (netlink.Qdisc, error) {
	qs, err := RetryDump(func() ([]netlink.Qdisc, error) { return netlink.QdiscList(link) })
	if err != nil {
		return nil, fmt.Errorf("listing qdiscs of %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == parent && q.Type() == kind {
			return q, nil
		}
	}
	return nil, nil
}
