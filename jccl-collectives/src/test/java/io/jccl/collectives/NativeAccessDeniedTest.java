package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Issue 16, bug #6: with native access denied (a child JVM with {@code --illegal-native-access=deny} and no
 * {@code --enable-native-access}) creating a communicator names the missing flag, not "/dev/shm full?".
 */
class NativeAccessDeniedTest {
    private static String child(String... jvmFlags) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        cmd.addAll(List.of(jvmFlags));
        cmd.addAll(List.of("--add-modules", "jdk.incubator.vector", "-XX:+UseSerialGC", "-Xmx256m", "-cp",
            System.getProperty("java.class.path"), NativeAccessDeniedMain.class.getName()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), out);
        return out;
    }

    @Test
    void shouldNameTheMissingFlagWhenNativeAccessIsDenied() throws Exception {
        String out = child("--illegal-native-access=deny");
        assertTrue(out.contains("FAILED io.jccl.collectives.CollectiveException"), out);
        assertTrue(out.contains("start java with --enable-native-access=ALL-UNNAMED"), out);
        assertFalse(out.contains("full or not writable"), out);
    }

    @Test
    void shouldCreateWithTheFlag() throws Exception {
        String out = child("--illegal-native-access=deny", "--enable-native-access=ALL-UNNAMED");
        assertTrue(out.contains("CREATED 1"), out);
    }
}
