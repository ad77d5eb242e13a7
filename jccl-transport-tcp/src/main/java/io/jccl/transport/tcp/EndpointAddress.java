package io.jccl.transport.tcp;

import io.jccl.verbs.VerbsException;

import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.util.HexFormat;

/**
 * The provider-specific part of a tcp endpoint record: the context listener's socket address and the QP's 128-bit
 * connection secret, written {@code 10.0.0.1:40123/<32 hex digits>} or {@code [fd00::2]:40123/<32 hex digits>}.
 *
 * @param socketAddress where the peer's context listens
 * @param secretHigh upper 64 bits of the secret
 * @param secretLow lower 64 bits of the secret
 */
record EndpointAddress(InetSocketAddress socketAddress, long secretHigh, long secretLow) {

    /** The text form placed in {@link io.jccl.verbs.Endpoint#address()}. */
    String format() {
        InetAddress ip = socketAddress.getAddress();
        String host = text(ip);
        if (ip instanceof Inet6Address) {
            host = "[" + host + "]";
        }
        return host + ":" + socketAddress.getPort() + "/" + HexFormat.of().toHexDigits(secretHigh)
            + HexFormat.of().toHexDigits(secretLow);
    }

    /**
     * Parses the text form. Only numeric addresses are accepted: a record must never make the connecting side
     * resolve names.
     *
     * @throws VerbsException INVALID_ARGUMENT saying what is wrong
     */
    static EndpointAddress parse(String text) {
        try {
            int slash = text.lastIndexOf('/');
            if (slash < 0 || text.length() - slash - 1 != 32) {
                throw new IllegalArgumentException("expected host:port/<32 hex digit secret>");
            }
            long high = HexFormat.fromHexDigitsToLong(text, slash + 1, slash + 17);
            long low = HexFormat.fromHexDigitsToLong(text, slash + 17, slash + 33);
            String hostPort = text.substring(0, slash);
            int colon = hostPort.lastIndexOf(':');
            if (colon <= 0) {
                throw new IllegalArgumentException("missing port");
            }
            String host = hostPort.substring(0, colon);
            int port = Integer.parseInt(hostPort.substring(colon + 1));
            if (port < 1 || port > 65535) {
                throw new IllegalArgumentException("port " + port + " outside 1..65535");
            }
            if (host.startsWith("[") && host.endsWith("]")) {
                host = host.substring(1, host.length() - 1);
            } else if (host.indexOf(':') >= 0) {
                throw new IllegalArgumentException("IPv6 addresses must be in brackets");
            }
            if (!isNumeric(host)) {
                throw new IllegalArgumentException("'" + host + "' is not a numeric IP address");
            }
            return new EndpointAddress(new InetSocketAddress(InetAddress.getByName(host), port), high, low);
        } catch (IllegalArgumentException | UnknownHostException e) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "malformed tcp endpoint address '" + text + "': " + e.getMessage(), e);
        }
    }

    /** An address as text; IPv6 in the RFC 5952 short form ({@code fd00::2}, not {@code fd00:0:0:0:0:0:0:2}). */
    static String text(InetAddress ip) {
        String full = ip.getHostAddress();
        if (!(ip instanceof Inet6Address)) {
            return full;
        }
        String scope = "";
        int percent = full.indexOf('%');
        if (percent >= 0) {
            scope = full.substring(percent);
            full = full.substring(0, percent);
        }
        String[] groups = full.split(":");
        int bestStart = -1;
        int bestLength = 1;
        for (int i = 0; i < groups.length; ) {
            if (groups[i].equals("0")) {
                int j = i;
                while (j < groups.length && groups[j].equals("0")) {
                    j++;
                }
                if (j - i > bestLength) {
                    bestStart = i;
                    bestLength = j - i;
                }
                i = j;
            } else {
                i++;
            }
        }
        if (bestStart < 0) {
            return full + scope;
        }
        String head = String.join(":", java.util.Arrays.copyOfRange(groups, 0, bestStart));
        String tail = String.join(":", java.util.Arrays.copyOfRange(groups, bestStart + bestLength, groups.length));
        return head + "::" + tail + scope;
    }

    private static boolean isNumeric(String host) {
        if (host.isEmpty()) {
            return false;
        }
        if (host.indexOf(':') >= 0) {
            // IPv6 literal, optionally with a %scope
            for (int i = 0; i < host.length(); i++) {
                char c = host.charAt(i);
                if (c == '%') {
                    return true;
                }
                if (Character.digit(c, 16) < 0 && c != ':' && c != '.') {
                    return false;
                }
            }
            return true;
        }
        for (int i = 0; i < host.length(); i++) {
            char c = host.charAt(i);
            if ((c < '0' || c > '9') && c != '.') {
                return false;
            }
        }
        return true;
    }
}
