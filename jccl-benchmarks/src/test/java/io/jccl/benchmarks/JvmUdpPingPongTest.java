package io.jccl.benchmarks;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The JVM ping-pong that roce-vs-tcp-bench.sh runs as the floor of a JVM provider: both hops complete on loopback and
 * print the C program's line (a broken {@code msghdr} or GSO message would fail a call or never arrive).
 */
class JvmUdpPingPongTest {
    @Test
    void shouldPrintOneWayLatenciesForBothHops() throws Throwable {
        for (String hop : new String[] {"plain", "roce"}) {
            String line = run("8", "200", "-", hop, "100");
            String[] fields = line.trim().split(",");
            assertEquals(6, fields.length, line);
            assertEquals(hop.equals("roce") ? "jvm_udp_pingpong-roce" : "jvm_udp_pingpong", fields[0]);
            assertEquals("8", fields[1]);
            assertEquals("200", fields[2]);
            double min = Double.parseDouble(fields[3]);
            double typical = Double.parseDouble(fields[4]);
            assertTrue(min > 0 && min <= typical, line);
        }
    }

    @Test
    void shouldCarryAFullPathMtuPacketInTheRoceHop() throws Throwable {
        String line = run("4096", "50", "-", "roce", "10");
        assertTrue(line.startsWith("jvm_udp_pingpong-roce,4096,50,"), line);
    }

    private static String run(String... args) throws Throwable {
        PrintStream out = System.out;
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try {
            JvmUdpPingPong.main(args);
        } finally {
            System.setOut(out);
        }
        return captured.toString(StandardCharsets.UTF_8);
    }
}
