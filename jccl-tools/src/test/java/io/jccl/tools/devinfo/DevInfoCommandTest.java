package io.jccl.tools.devinfo;

import io.jccl.common.Config;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Device;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.spi.AbstractContext;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.DatagramSocket;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** {@code jccl devinfo -v --pid PID}: counters read from a running process's counter file. */
class DevInfoCommandTest {
    private static String run(DevInfoCommand command, String... args) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        command.out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        int status = new CommandLine(command).execute(args);
        return status + "\n" + bytes.toString(StandardCharsets.UTF_8);
    }

    @Test
    void shouldPrintTheCountersOfAnotherContextThroughItsFile() {
        assumeTrue(Verbs.devices().stream().map(Device::name).anyMatch("tcp0"::equals), "no tcp0 device");
        long pid = ProcessHandle.current().pid();
        try (Context context = Verbs.device("tcp0").open()) {
            // Counts that only this context has: the command opens its own context, which starts at zero.
            ((AbstractContext) context).counterSet().add(Counter.PORT_XMIT_DATA, 123_456_789L);
            ((AbstractContext) context).counterSet().newLocal().add(Counter.RDMA_SENDS, 42);
            String text = run(new DevInfoCommand(), "-d", "tcp0", "--pid", Long.toString(pid));
            assertTrue(text.startsWith("0\n"), text);
            assertTrue(text.contains("process:\t" + pid), text);
            assertTrue(text.contains("counters (process " + pid + "'s context"), text);
            assertTrue(text.lines().anyMatch(l -> l.matches("\t\tport_xmit_data:\t+123456789")), text);
            assertTrue(text.lines().anyMatch(l -> l.matches("\t\trdma_sends:\t+42")), text);
            String json = run(new DevInfoCommand(), "-d", "tcp0", "--pid", Long.toString(pid), "--json");
            assertTrue(json.contains("\"port_xmit_data\": 123456789"), json);
            assertTrue(json.contains("\"pid\": " + pid), json);
        }
    }

    /** ibv_devinfo works while jobs run: roce0's configured port held by another socket does not stop it. */
    @Test
    void shouldQueryRoce0WhileItsConfiguredPortIsHeld() throws Exception {
        assumeTrue(Verbs.devices().stream().map(Device::name).anyMatch("roce0"::equals), "no roce0 device");
        String property = Config.propertyName("JCCL_ROCE_PORT");
        try (DatagramSocket holder = new DatagramSocket(new InetSocketAddress("127.0.0.1", 0))) {
            System.setProperty(property, Integer.toString(holder.getLocalPort()));
            String text = run(new DevInfoCommand(), "-d", "roce0", "-v");
            assertTrue(text.startsWith("0\n") && text.contains("hca_id:\troce0"), text);
        } finally {
            System.clearProperty(property);
        }
    }

    @Test
    void shouldSayClearlyWhenAProcessPublishesNothing() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        PrintStream err = System.err;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        System.setErr(new PrintStream(bytes, true, StandardCharsets.UTF_8));
        try {
            String text = run(new DevInfoCommand(), "--pid", Long.toString(gone.pid()));
            assertTrue(text.startsWith("1\n"), text);
        } finally {
            System.setErr(err);
        }
        String message = bytes.toString(StandardCharsets.UTF_8);
        assertTrue(message.contains("No JCCL counters published by process " + gone.pid()), message);
        assertEquals(1, message.lines().count(), message);
    }
}
