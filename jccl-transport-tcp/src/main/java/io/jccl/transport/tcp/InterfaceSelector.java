package io.jccl.transport.tcp;

import io.jccl.verbs.VerbsException;

import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.NetworkInterface;
import java.net.SocketException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.stream.Collectors;

/**
 * Chooses the address a tcp context listens on, with NCCL_SOCKET_IFNAME's syntax for {@code JCCL_SOCKET_IFNAME}:
 * a comma-separated list of name prefixes ({@code eth,ens}); a leading {@code ^} excludes the listed interfaces
 * instead ({@code ^docker,lo}); a leading {@code =} (after the optional {@code ^}) matches exact names
 * ({@code =eth0}, {@code ^=docker0}). Without a filter the first interface that is up, is not loopback and has an
 * address wins (docker/virbr bridges skipped), else loopback. Within the interface IPv4 is preferred unless
 * {@code JCCL_SOCKET_FAMILY=AF_INET6}; global IPv6 addresses are preferred over link-local ones.
 */
final class InterfaceSelector {
    /** An interface as the selector sees it (lets tests describe hosts that do not exist). */
    record Candidate(String name, boolean up, boolean loopback, List<InetAddress> addresses) {
    }

    /** The chosen interface and address. */
    record Choice(String interfaceName, InetAddress address) {
    }

    private InterfaceSelector() {
    }

    /** The interfaces of this host, in index order. */
    static List<Candidate> hostInterfaces() {
        List<Candidate> result = new ArrayList<>();
        try {
            List<NetworkInterface> all = Collections.list(NetworkInterface.getNetworkInterfaces());
            all.sort((a, b) -> Integer.compare(a.getIndex(), b.getIndex()));
            for (NetworkInterface nif : all) {
                result.add(new Candidate(nif.getName(), nif.isUp(), nif.isLoopback(),
                    Collections.list(nif.getInetAddresses())));
            }
        } catch (SocketException e) {
            throw new VerbsException(VerbsException.Reason.SYSTEM, "cannot list network interfaces: " + e, e);
        }
        return result;
    }

    /** Chooses among this host's interfaces. */
    static Choice select(String spec, String family) {
        return select(hostInterfaces(), spec, family);
    }

    /**
     * Chooses among {@code candidates}.
     *
     * @throws VerbsException INVALID_ARGUMENT naming the interfaces that exist when nothing matches
     */
    static Choice select(List<Candidate> candidates, String spec, String family) {
        if (spec == null || spec.isBlank()) {
            for (Candidate c : candidates) {
                if (c.up() && !c.loopback() && !c.name().startsWith("docker") && !c.name().startsWith("virbr")) {
                    InetAddress a = pickAddress(c, family);
                    if (a != null) {
                        return new Choice(c.name(), a);
                    }
                }
            }
            for (Candidate c : candidates) {
                if (c.up() && c.loopback()) {
                    InetAddress a = pickAddress(c, family);
                    if (a != null) {
                        return new Choice(c.name(), a);
                    }
                }
            }
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "no network interface is up with an "
                + familyText(family) + " address; interfaces here: " + describe(candidates));
        }
        for (Candidate c : candidates) {
            if (c.up() && matches(spec, c.name())) {
                InetAddress a = pickAddress(c, family);
                if (a != null) {
                    return new Choice(c.name(), a);
                }
            }
        }
        throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "JCCL_SOCKET_IFNAME=" + spec
            + " matches no interface that is up with an " + familyText(family) + " address; interfaces here: "
            + describe(candidates));
    }

    /** Whether interface {@code name} passes the NCCL_SOCKET_IFNAME-style filter {@code spec}. */
    static boolean matches(String spec, String name) {
        String s = spec.trim();
        boolean exclude = s.startsWith("^");
        if (exclude) {
            s = s.substring(1);
        }
        boolean exact = s.startsWith("=");
        if (exact) {
            s = s.substring(1);
        }
        boolean listed = false;
        for (String part : s.split(",")) {
            String p = part.trim();
            if (p.isEmpty()) {
                continue;
            }
            if (exact ? name.equals(p) : name.startsWith(p)) {
                listed = true;
                break;
            }
        }
        return exclude != listed;
    }

    private static InetAddress pickAddress(Candidate c, String family) {
        InetAddress best = null;
        int bestRank = Integer.MAX_VALUE;
        for (InetAddress a : c.addresses()) {
            int rank;
            if (a instanceof Inet4Address) {
                if ("AF_INET6".equals(family)) {
                    continue;
                }
                rank = 0;
            } else if (a instanceof Inet6Address) {
                if ("AF_INET".equals(family)) {
                    continue;
                }
                rank = a.isLinkLocalAddress() ? 2 : 1;
            } else {
                continue;
            }
            if (rank < bestRank) {
                bestRank = rank;
                best = a;
            }
        }
        if (best instanceof Inet6Address v6 && !v6.isLinkLocalAddress()) {
            // Java reports "fd77::1%eth0" even for global addresses; the scope means nothing to the peer (its
            // interfaces have other names), so advertise the bare address. Link-local keeps its scope.
            try {
                best = InetAddress.getByAddress(best.getAddress());
            } catch (java.net.UnknownHostException impossible) {
                // 16 bytes are always a valid address
            }
        }
        return best;
    }

    private static String familyText(String family) {
        return family == null ? "IPv4 or IPv6" : family.equals("AF_INET") ? "IPv4" : "IPv6";
    }

    static String describe(List<Candidate> candidates) {
        if (candidates.isEmpty()) {
            return "none";
        }
        return candidates.stream().map(c -> c.name() + " (" + (c.up() ? "up" : "down")
                + (c.addresses().isEmpty() ? ", no address" : ", " + c.addresses().stream()
                .map(EndpointAddress::text).collect(Collectors.joining(" "))) + ")")
            .collect(Collectors.joining(", "));
    }
}
