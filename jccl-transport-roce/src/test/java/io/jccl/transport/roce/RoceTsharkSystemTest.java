package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.BthFlyweight;
import io.jccl.transport.roce.wire.RoceOpcode;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Every packet type roce0 sends, decoded by Debian's tshark (Wireshark's InfiniBand dissector), which JCCL did not
 * write: two contexts on loopback exchange SEND and RDMA WRITE FIRST/MIDDLE/LAST/ONLY with and without immediate
 * data, RDMA READ requests and responses FIRST/MIDDLE/LAST/ONLY, both atomics and their ATOMIC ACKNOWLEDGEs, ACKs,
 * an RNR NAK, a remote access NAK and CNPs (a test {@link EcnSource} marks SEND ONLY packets Congestion
 * Experienced). A packet socket captures loopback ({@code scripts/roce-capture-check.py}, which cuts each UDP GSO
 * send into the datagrams Linux would put on a wire) into a pcap; tshark's decode of every datagram between the two
 * ports must be InfiniBand
 * with exactly the BTH fields (opcode, destination QP, PSN, P_Key) that roce0's send path recorded for the
 * packets it sent, no malformed packet, and ECT(0) in the IP header (Linux keeps the ECN bits JCCL sets).
 * tshark has no ICRC check (RoceCaptureSystemTest checks the ICRC with scapy). Needs root, python3 and tshark
 * ({@code apt-get install tshark}); skipped, saying which is missing, elsewhere.
 */
class RoceTsharkSystemTest {
    private static final String TSHARK = "/usr/bin/tshark";
    private static final long SECOND_NS = 1_000_000_000L;

    private static boolean root() throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("Uid:")) {
                return line.split("\\s+")[1].equals("0");
            }
        }
        return false;
    }

    private static int port(QueuePair qp) {
        String address = qp.localEndpoint().address();
        return Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
    }

    private static WorkCompletion poll(CompletionQueue cq) {
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = System.nanoTime() + 20 * SECOND_NS; // a guard against hanging, not a timing assertion
        while (System.nanoTime() < deadline) {
            if (cq.poll(wc, 1, 1_000_000L) == 1) {
                return wc[0];
            }
        }
        throw new AssertionError("no completion within 20 s");
    }

    private static void success(CompletionQueue cq) {
        WorkCompletion wc = poll(cq);
        assertTrue(wc.isSuccess(), wc.toString());
    }

    /** "opcode destQp psn pKey" of the packet at 0 of {@code packet}, as recorded on the send path. */
    private static String fields(ByteBuffer packet) {
        BthFlyweight bth = new BthFlyweight().wrap(packet, 0);
        return bth.opcode() + " " + bth.destQp() + " " + bth.psn() + " " + bth.pKey();
    }

    /** Runs a command to its end and returns its standard output (standard error is kept apart). */
    private static List<String> run(List<String> command) throws Exception {
        Process p = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        List<String> lines = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).lines().toList();
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), "tshark did not finish: " + command);
        assertEquals(0, p.exitValue(), "exit value of " + command);
        return lines;
    }

    @Test
    void shouldSendPacketsThatTsharkDecodesAsInfiniBandWithTheFieldsJcclSent() throws Exception {
        assumeTrue(root(), "capturing needs root");
        assumeTrue(Files.isExecutable(Path.of(TSHARK)), "no " + TSHARK + " (apt-get install tshark)");
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 256);
        try (RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
             RoceContext cb = (RoceContext) RoceProvider.device().open(settings)) {
            // B marks SEND ONLY packets Congestion Experienced: its notification point answers with CNPs
            cb.ecnSource((datagram, length) -> (datagram.get(0) & 0xFF) == RoceOpcode.SEND_ONLY ? EcnSource.CE
                : EcnSource.ECT_0);
            AccessFlag[] remote = {AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC};
            LoopbackQueuePairs pair = LoopbackQueuePairs.connect(ca, cb, 64, remote);
            ProtectionDomain pa = pair.pa();
            ProtectionDomain pb = pair.pb();
            CompletionQueue qa = pair.qa();
            CompletionQueue qb = pair.qb();
            QueuePair a = pair.a();
            QueuePair b = pair.b();
            MemoryRegion ma = pa.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion mb = pb.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC);
            int portA = port(a);
            int portB = port(b);

            // The capture: scripts/roce-capture-check.py's packet socket, which cuts each UDP GSO send (loopback
            // carries one as a single buffer, and a live tshark would decode only its first packet) into the
            // datagrams Linux puts on a wire and writes them to a pcap, which tshark then reads.
            Path script = Path.of("scripts/roce-capture-check.py").toAbsolutePath();
            assumeTrue(Files.exists(script), "run from the module directory: " + script);
            Path capture = Files.createTempFile("jccl-roce-tshark", ".pcap");
            ProcessBuilder sniff = new ProcessBuilder("/usr/bin/python3", script.toString(), "lo", "0",
                String.valueOf(portA), String.valueOf(portB)).redirectErrorStream(true);
            sniff.environment().put("PCAP", capture.toString());
            sniff.environment().put("CHECK", "0"); // RoceCaptureSystemTest checks the ICRCs with scapy
            Process sniffer = sniff.start();
            BufferedReader sniffed = new BufferedReader(new InputStreamReader(sniffer.getInputStream(),
                StandardCharsets.UTF_8));
            StringBuilder sniffLog = new StringBuilder();
            String ready;
            while ((ready = sniffed.readLine()) != null && !ready.equals("ready")) {
                sniffLog.append(ready).append('\n');
            }
            assertEquals("ready", ready, "capture did not start: " + sniffLog);

            List<String> sent = Collections.synchronizedList(new ArrayList<>());
            ca.dropFilter((packet, length) -> sent.add(fields(packet)) && false);
            cb.dropFilter((packet, length) -> sent.add(fields(packet)) && false);

            for (int size : new int[] {0, 100, 600}) { // ONLY (0 and 100 bytes) and FIRST/MIDDLE/LAST at MTU 256
                for (SendOpcode op : new SendOpcode[] {SendOpcode.SEND, SendOpcode.SEND_WITH_IMM}) {
                    b.postReceive(new ReceiveWorkRequest().local(mb, 0, 4096));
                    a.postSend(new SendWorkRequest().opcode(op).immediateData(size).flags(SendFlag.SIGNALED)
                        .local(ma, 0, size));
                    success(qa);
                    success(qb);
                }
                a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                    .local(ma, 0, size).remote(mb.address(), mb.rkey()));
                success(qa);
                b.postReceive(new ReceiveWorkRequest().local(mb, 0, 4096));
                a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE_WITH_IMM).immediateData(7)
                    .flags(SendFlag.SIGNALED).local(ma, 0, size).remote(mb.address(), mb.rkey()));
                success(qa);
                success(qb);
                a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
                    .local(ma, 0, size).remote(mb.address(), mb.rkey()));
                success(qa);
            }
            a.postSend(new SendWorkRequest().opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).flags(SendFlag.SIGNALED)
                .local(ma, 0, 8).remote(mb.address() + 1024, mb.rkey()).atomic(5, 0));
            success(qa);
            a.postSend(new SendWorkRequest().opcode(SendOpcode.ATOMIC_CMP_AND_SWP).flags(SendFlag.SIGNALED)
                .local(ma, 0, 8).remote(mb.address() + 1024, mb.rkey()).atomic(5, 9));
            success(qa);
            // RNR NAK: a SEND before its receive is posted; the retry after min_rnr_timer finds it
            a.postSend(new SendWorkRequest().opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(ma, 0, 8));
            long waitUntil = System.nanoTime() + 20 * SECOND_NS;
            while (cb.counters().getOrDefault(io.jccl.verbs.Counter.SEND_RNR_ERR, 0L) == 0) {
                if (System.nanoTime() > waitUntil) {
                    fail("no RNR NAK within 20 s");
                }
                Thread.sleep(1);
            }
            b.postReceive(new ReceiveWorkRequest().local(mb, 0, 4096));
            success(qa);
            success(qb);
            // NAK remote access error (the last: both QPs enter ERR)
            a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(ma, 0, 8).remote(mb.address(), mb.rkey() ^ 0x5A5A));
            assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, poll(qa).status());
            ca.dropFilter(null);
            cb.dropFilter(null);
            Thread.sleep(200); // packets still on their way (ACKs); anything unexpected shows as a mismatch below
            sniffer.getOutputStream().close(); // the script's end of capture
            for (String row; (row = sniffed.readLine()) != null; ) {
                sniffLog.append(row).append('\n');
            }
            assertTrue(sniffer.waitFor(60, TimeUnit.SECONDS), "capture did not stop");
            assertEquals(0, sniffer.exitValue(), sniffLog.toString());
            if (ca.gso()) { // SENDs of 600 bytes at MTU 256: FIRST, MIDDLE and the shorter LAST in one GSO send
                java.util.regex.Matcher gso = java.util.regex.Pattern.compile("GSO sends (\\d+)").matcher(sniffLog);
                assertTrue(gso.find() && Integer.parseInt(gso.group(1)) > 0, "no GSO send captured: " + sniffLog);
            }
            List<String> command = new ArrayList<>(List.of(TSHARK, "-r", capture.toString(), "-d", "udp.port=="
                + portA + ",infiniband", "-d", "udp.port==" + portB + ",infiniband", "-T", "fields", "-E",
                "separator=;", "-e", "udp.dstport", "-e", "ip.dsfield.ecn", "-e", "infiniband.bth.opcode", "-e",
                "infiniband.bth.destqp", "-e", "infiniband.bth.psn", "-e", "infiniband.bth.p_key", "-e",
                "infiniband.aeth.syndrome", "-e", "_ws.malformed"));
            // The payload is application bytes: without this, heuristics guess upper protocols in it (a SEND of
            // zeros "is" a malformed RPC-over-RDMA message). The InfiniBand headers are what is checked. Protocols
            // found only by those heuristics are turned off; ethertype and EoIB stay (Ethernet needs the one, the
            // other is part of the InfiniBand dissector).
            for (String heuristic : run(List.of(TSHARK, "-G", "heuristic-decodes"))) {
                String[] f = heuristic.split("\t");
                if (f.length >= 2 && f[0].equals("infiniband.payload") && !f[1].equals("ethertype")
                    && !f[1].startsWith("infiniband")) {
                    command.add("--disable-protocol");
                    command.add(f[1]);
                }
            }
            List<String> decoded = run(command);
            Files.deleteIfExists(capture);
            List<String> seen = new ArrayList<>();
            Set<Integer> opcodes = new TreeSet<>();
            Set<Integer> syndromes = new TreeSet<>();
            for (String row : decoded) {
                String[] f = row.split(";", -1);
                assertEquals(8, f.length, row);
                assertEquals("", f[7], "malformed: " + row);
                assertEquals("2", f[1], "ECT(0) expected in the IP header: " + row);
                assertTrue(!f[2].isEmpty(), "not decoded as InfiniBand: " + row);
                int opcode = Integer.decode(f[2]);
                int destQp = Integer.decode(f[3]);
                int expectedQp = Integer.parseInt(f[0]) == portB ? b.queuePairNumber() : a.queuePairNumber();
                assertEquals(expectedQp, destQp, "destination QP of " + row);
                opcodes.add(opcode);
                if (!f[6].isEmpty()) {
                    syndromes.add(Integer.decode(f[6]));
                }
                seen.add(opcode + " " + destQp + " " + Integer.decode(f[4]) + " " + Integer.decode(f[5]));
            }
            List<String> expected = new ArrayList<>(sent);
            Collections.sort(expected);
            Collections.sort(seen);
            assertEquals(expected, seen, "tshark's decode of every datagram equals what roce0 sent (capture: "
                + sniffLog.toString().trim() + "; " + ca + " / " + cb + ")");
            Set<Integer> all = new TreeSet<>(List.of(0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
                0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, RoceOpcode.CNP));
            assertEquals(all, opcodes, "every opcode roce0 sends was captured");
            assertTrue(syndromes.contains(0x1F), "an ACK (unlimited credits): " + syndromes);
            assertTrue(syndromes.stream().anyMatch(s -> (s & 0xE0) == 0x20), "an RNR NAK: " + syndromes);
            assertTrue(syndromes.contains(0x62), "a remote access NAK: " + syndromes);
            System.out.println("roce tshark check: " + seen.size() + " packets, opcodes " + opcodes.stream()
                .map(o -> String.format("0x%02X", o)).toList() + ", AETH syndromes " + syndromes.stream()
                .map(s -> String.format("0x%02X", s)).toList() + ", 0 malformed");
        }
    }
}
