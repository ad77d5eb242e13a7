package io.jccl.transport.tcp;

import io.jccl.verbs.Context;
import io.jccl.verbs.VerbsException;
import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class InterfaceSelectorTest {
    private static InetAddress ip(String text) {
        try {
            return InetAddress.getByName(text);
        } catch (UnknownHostException e) {
            throw new AssertionError(e);
        }
    }

    private static final List<InterfaceSelector.Candidate> HOST = List.of(
        new InterfaceSelector.Candidate("lo", true, true, List.of(ip("127.0.0.1"), ip("::1"))),
        new InterfaceSelector.Candidate("docker0", true, false, List.of(ip("172.17.0.1"))),
        new InterfaceSelector.Candidate("eth0", true, false, List.of(ip("fe80::1"), ip("fd00::2"), ip("10.0.0.2"))),
        new InterfaceSelector.Candidate("eth1", false, false, List.of(ip("10.1.0.2"))),
        new InterfaceSelector.Candidate("ib0", true, false, List.of(ip("fd01::5"))));

    @Test
    void shouldMatchPrefixesExclusionsAndExactNamesAsNccl() {
        assertTrue(InterfaceSelector.matches("eth", "eth0"));
        assertFalse(InterfaceSelector.matches("eth", "ib0"));
        assertTrue(InterfaceSelector.matches("ib,eth", "eth1"));
        assertFalse(InterfaceSelector.matches("^eth,lo", "eth0"));
        assertTrue(InterfaceSelector.matches("^eth,lo", "ib0"));
        assertTrue(InterfaceSelector.matches("=eth0", "eth0"));
        assertFalse(InterfaceSelector.matches("=eth0", "eth01"));
        assertFalse(InterfaceSelector.matches("^=docker0", "docker0"));
        assertTrue(InterfaceSelector.matches("^=docker0", "docker01"));
    }

    @Test
    void shouldPreferTheFirstUpNonLoopbackInterfaceAndIpv4() {
        var choice = InterfaceSelector.select(HOST, null, null);
        assertEquals("eth0", choice.interfaceName());
        assertEquals(ip("10.0.0.2"), choice.address());
        assertEquals(ip("fd00::2"), InterfaceSelector.select(HOST, null, "AF_INET6").address());
        assertEquals("ib0", InterfaceSelector.select(HOST, "ib", null).interfaceName());
        assertEquals("lo", InterfaceSelector.select(HOST, "=lo", null).interfaceName());
        assertEquals("ib0", InterfaceSelector.select(HOST, "^eth,lo,docker", null).interfaceName());
    }

    @Test
    void shouldFallBackToLoopbackWhenNothingElseIsUp() {
        var loopbackOnly = List.of(HOST.get(0), HOST.get(3));
        assertEquals("lo", InterfaceSelector.select(loopbackOnly, null, null).interfaceName());
    }

    @Test
    void shouldNameTheExistingInterfacesWhenTheRequestedOneIsMissing() {
        VerbsException e = assertThrows(VerbsException.class, () -> InterfaceSelector.select(HOST, "=bond0", null));
        assertTrue(e.getMessage().contains("JCCL_SOCKET_IFNAME==bond0"), e.getMessage());
        assertTrue(e.getMessage().contains("eth0 (up, fe80::1"), e.getMessage());
        assertTrue(e.getMessage().contains("eth1 (down"), e.getMessage());
        // eth1 exists but is down
        assertThrows(VerbsException.class, () -> InterfaceSelector.select(HOST, "eth1", null));
    }

    @Test
    void shouldFailAtOpenForAnInterfaceThatDoesNotExist() {
        VerbsException e = assertThrows(VerbsException.class, () -> TcpProvider.device().open(
            TcpSettings.fromConfig().withInterfaces("=no-such-if0")));
        assertTrue(e.getMessage().contains("interfaces here: "), e.getMessage());
        assertTrue(e.getMessage().contains("lo ("), e.getMessage());
    }

    @Test
    void shouldListenOnLoopbackOverIpv6Too() {
        Context context;
        try {
            context = TcpProvider.device().open(TcpSettings.fromConfig().withAddress("::1"));
        } catch (VerbsException e) {
            org.junit.jupiter.api.Assumptions.abort("no IPv6 loopback here: " + e.getMessage());
            return;
        }
        try (Context other = TcpProvider.device().open(TcpSettings.fromConfig().withAddress("::1"))) {
            var a = TcpTestSupport.Side.create(context);
            var b = TcpTestSupport.Side.create(other);
            assertTrue(a.qp().localEndpoint().address().startsWith("[::1]:"), a.qp().localEndpoint().address());
            TcpTestSupport.connect(a.qp(), b.qp());
            var mr = a.pd().allocateMemory(64, TcpTestSupport.ALL);
            var rb = b.pd().allocateMemory(64, TcpTestSupport.ALL);
            a.qp().postSend(new io.jccl.verbs.SendWorkRequest().opcode(io.jccl.verbs.SendOpcode.RDMA_WRITE)
                .flags(io.jccl.verbs.SendFlag.SIGNALED).remote(rb.address(), rb.rkey()).local(mr, 0, 64));
            TcpTestSupport.pollSuccess(a.cq());
        } finally {
            context.close();
        }
    }

    @Test
    void shouldRoundTripEndpointAddressesAndRejectMalformedOnes() {
        var v4 = EndpointAddress.parse("10.0.0.1:4000/0123456789abcdef0123456789abcdef");
        assertEquals(4000, v4.socketAddress().getPort());
        assertEquals(0x0123456789abcdefL, v4.secretHigh());
        assertEquals(v4, EndpointAddress.parse(v4.format()));
        var v6 = EndpointAddress.parse("[fd00::2]:4000/0123456789abcdef0123456789abcdef");
        assertEquals(v6, EndpointAddress.parse(v6.format()));
        for (String bad : List.of("", "10.0.0.1:4000", "10.0.0.1/0123456789abcdef0123456789abcdef",
            "example.com:4000/0123456789abcdef0123456789abcdef", "fd00::2:4000/0123456789abcdef0123456789abcdef",
            "10.0.0.1:70000/0123456789abcdef0123456789abcdef", "10.0.0.1:4000/0123")) {
            assertThrows(VerbsException.class, () -> EndpointAddress.parse(bad), bad);
        }
    }

    @Test
    void shouldDropTheLocalScopeOfGlobalIpv6Addresses() throws Exception {
        var scoped = java.net.Inet6Address.getByAddress(null, ip("fd77::1").getAddress(), 3);
        var linkLocal = java.net.Inet6Address.getByAddress(null, ip("fe80::1").getAddress(), 3);
        var host = List.of(new InterfaceSelector.Candidate("eth0", true, false, List.of(scoped)),
            new InterfaceSelector.Candidate("eth1", true, false, List.of(linkLocal)));
        var global = InterfaceSelector.select(host, "=eth0", null).address();
        assertEquals("fd77::1", EndpointAddress.text(global));
        assertEquals("fe80::1%3", EndpointAddress.text(InterfaceSelector.select(host, "=eth1", null).address()));
    }
}
