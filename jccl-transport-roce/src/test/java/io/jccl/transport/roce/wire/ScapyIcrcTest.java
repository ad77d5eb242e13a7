package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * JCCL's ICRC against an implementation it did not write: Debian's python3-scapy ({@code scapy.contrib.roce}),
 * over a packet of every opcode in the table with payloads of every pad count, random IPv4 identification, TOS,
 * TTL, FECN/BECN and QPN/PSN. Skipped, with the reason, where no python3 with scapy is installed
 * ({@code apt-get install python3-scapy}).
 */
class ScapyIcrcTest {
    private static final String[] PYTHONS = {"/usr/bin/python3", "python3"};

    @Test
    void shouldAgreeWithScapyOnEveryOpcode() throws Exception {
        SplittableRandom random = new SplittableRandom(20);
        Icrc icrc = new Icrc();
        BthFlyweight bth = new BthFlyweight();
        List<String> datagrams = new ArrayList<>();
        List<String> expected = new ArrayList<>();
        for (int opcode = 0; opcode < 256; opcode++) {
            if (!RoceOpcode.isKnown(opcode)) {
                continue;
            }
            for (int payload : RoceOpcode.has(opcode, RoceOpcode.PAYLOAD_MASK) ? new int[] {0, 1, 2, 3, 257}
                : new int[] {0}) {
                int roceLength = RoceOpcode.packetLength(opcode, payload);
                ByteBuffer d = ByteBuffer.allocate(Icrc.IPV4_HEADER_LENGTH + Icrc.UDP_HEADER_LENGTH + roceLength);
                int id = random.nextInt(1 << 16);
                int sport = UdpSourcePort.of(0, random.nextInt(1 << 24), random.nextInt(1 << 24));
                d.put(0, (byte) 0x45).put(1, (byte) random.nextInt(256)).putShort(2, (short) d.capacity())
                    .putShort(4, (short) id).putShort(6, (short) 0x4000).put(8, (byte) random.nextInt(256))
                    .put(9, (byte) 17).putShort(10, (short) random.nextInt(1 << 16))
                    .putInt(12, 0x0A000001).putInt(16, 0x0A000002)
                    .putShort(20, (short) sport).putShort(22, (short) Icrc.ROCE_V2_UDP_PORT)
                    .putShort(24, (short) (Icrc.UDP_HEADER_LENGTH + roceLength)).putShort(26, (short) 0);
                int roce = Icrc.IPV4_HEADER_LENGTH + Icrc.UDP_HEADER_LENGTH;
                bth.wrap(d, roce).init(opcode, RoceOpcode.padCount(payload), BthFlyweight.DEFAULT_PKEY,
                    random.nextInt(1 << 24), random.nextInt(1 << 24))
                    .fecn(random.nextBoolean()).becn(random.nextBoolean()).ackRequest(random.nextBoolean());
                for (int i = roce + BthFlyweight.LENGTH; i < d.capacity() - RoceOpcode.ICRC_LENGTH; i++) {
                    d.put(i, (byte) random.nextInt(256));
                }
                int value = icrc.computeIpv4Datagram(d, 0);
                Icrc.put(d, roce, roceLength, value);
                datagrams.add(HexFormat.of().formatHex(d.array()));
                expected.add(HexFormat.of().formatHex(d.array(), d.capacity() - 4, d.capacity()));
            }
        }
        List<String> scapy = runScapy(datagrams);
        assertEquals(expected.size(), scapy.size());
        for (int i = 0; i < expected.size(); i++) {
            assertEquals(expected.get(i), scapy.get(i), "datagram " + datagrams.get(i));
        }
        assertTrue(expected.size() > 60, "covers every opcode");
    }

    /** scapy's ICRC bytes for each datagram, or a skip when no python3 has scapy. */
    private static List<String> runScapy(List<String> datagrams) throws IOException, InterruptedException {
        Path script = Files.createTempFile("scapy_icrc", ".py");
        try (InputStream in = ScapyIcrcTest.class.getResourceAsStream("scapy_icrc.py")) {
            Files.write(script, in.readAllBytes());
        }
        try {
            String reasons = "";
            for (String python : PYTHONS) {
                Process p;
                try {
                    p = new ProcessBuilder(python, script.toString()).redirectErrorStream(false).start();
                } catch (IOException e) {
                    reasons += python + ": " + e.getMessage() + "; ";
                    continue;
                }
                // Write on this thread, then read: 70 short lines fit the pipe buffers both ways.
                try (OutputStream out = p.getOutputStream()) {
                    out.write((String.join("\n", datagrams) + "\n").getBytes(StandardCharsets.US_ASCII));
                }
                String stdout = new String(p.getInputStream().readAllBytes(), StandardCharsets.US_ASCII);
                String stderr = new String(p.getErrorStream().readAllBytes(), StandardCharsets.US_ASCII);
                if (!p.waitFor(120, TimeUnit.SECONDS)) {
                    p.destroyForcibly();
                    throw new AssertionError(python + " did not finish");
                }
                if (p.exitValue() == 3) {
                    reasons += python + ": " + stderr.trim() + "; ";
                    continue;
                }
                assertEquals(0, p.exitValue(), python + " failed: " + stderr);
                return stdout.lines().toList();
            }
            assumeTrue(false, "no python3 with scapy.contrib.roce (apt-get install python3-scapy): " + reasons);
            return List.of();
        } finally {
            Files.deleteIfExists(script);
        }
    }
}
