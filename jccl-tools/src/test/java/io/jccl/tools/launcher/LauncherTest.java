package io.jccl.tools.launcher;

import io.jccl.tools.Main;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LauncherTest {
    private final ByteArrayOutputStream outBytes = new ByteArrayOutputStream();
    private final ByteArrayOutputStream errBytes = new ByteArrayOutputStream();
    private final PrintStream out = new PrintStream(outBytes, true, StandardCharsets.UTF_8);
    private final PrintStream err = new PrintStream(errBytes, true, StandardCharsets.UTF_8);

    private Launcher.Builder sh(int ranks, String script) {
        return Launcher.builder().ranks(ranks).command(List.of("sh", "-c", script)).out(out).err(err);
    }

    private String out() {
        return outBytes.toString(StandardCharsets.UTF_8);
    }

    private String err() {
        return errBytes.toString(StandardCharsets.UTF_8);
    }

    @Test
    void shouldGiveEveryRankItsEnvironmentAndPrefixItsLines() throws Exception {
        Launcher launcher = sh(3, "echo \"$JCCL_RANK $JCCL_WORLD_SIZE $JCCL_LOCAL_RANK $JCCL_LOCAL_SIZE $RANK "
            + "$WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT $JCCL_STORE_ADDR $JCCL_JOB_ID\"").build();
        Launcher.Result result = launcher.run();
        assertEquals(0, result.exitCode());
        assertEquals(-1, result.failedRank());
        assertArrayEquals(new int[] {0, 0, 0}, result.rankExitCodes());
        Set<String> lines = out().lines().collect(Collectors.toSet());
        int port = launcher.masterPort();
        String job = launcher.jobId();
        for (int r = 0; r < 3; r++) {
            String expected = "[" + r + "] " + r + " 3 " + r + " 3 " + r + " 3 " + r + " 127.0.0.1 " + port
                + " 127.0.0.1:" + port + " " + job;
            assertTrue(lines.contains(expected), "missing '" + expected + "' in " + lines);
        }
        Map<String, String> env = launcher.rankEnvironment(1);
        assertEquals("1", env.get("JCCL_RANK"));
        assertEquals("3", env.get("LOCAL_WORLD_SIZE"));
    }

    @Test
    void shouldPropagateTheFirstNonZeroExitAndKillTheOthers() throws Exception {
        long start = System.nanoTime();
        Launcher.Result result = sh(3, "if [ \"$JCCL_RANK\" = 1 ]; then sleep 0.2; exit 7; fi; sleep 30").build().run();
        long seconds = (System.nanoTime() - start) / 1_000_000_000L;
        assertEquals(7, result.exitCode());
        assertEquals(1, result.failedRank());
        assertFalse(result.timedOut());
        assertTrue(seconds < 15, "other ranks were not killed promptly: " + seconds + " s");
        assertTrue(err().contains("jccl run: rank 1 exited with code 7; killing the 2 other ranks"), err());
    }

    @Test
    void shouldKillEverythingAtTheTimeout() throws Exception {
        Launcher.Result result = sh(2, "sleep 30").timeout(Duration.ofMillis(500)).build().run();
        assertEquals(Launcher.TIMEOUT_STATUS, result.exitCode());
        assertTrue(result.timedOut());
        assertTrue(err().contains("timeout"), err());
    }

    @Test
    void shouldLeaveLinesAloneWithoutPrefix() throws Exception {
        Launcher.Result result = sh(1, "echo hello; echo oops >&2").prefixOutput(false).build().run();
        assertEquals(0, result.exitCode());
        assertEquals("hello", out().strip());
        assertEquals("oops", err().strip());
    }

    @Test
    void shouldLaunchAJavaMainClassWithTheJcclClassPath() throws Exception {
        Launcher.Result result = Launcher.builder().ranks(2).javaMain(RankMain.class.getName(), List.of("x", "y"))
            .out(out).err(err).timeout(Duration.ofSeconds(60)).build().run();
        assertEquals(0, result.exitCode(), err());
        Set<String> lines = out().lines().collect(Collectors.toSet());
        assertTrue(lines.contains("[0] rank 0/2 args [x, y]"), lines.toString());
        assertTrue(lines.contains("[1] rank 1/2 args [x, y]"), lines.toString());
    }

    @Test
    void shouldParseTheRunCommandLine() {
        RunCommand run = Main.commandLine().parseArgs("run", "-np", "4", "--timeout", "9", "--no-prefix", "python3",
            "-c", "print(1)", "--flag").subcommand().commandSpec().commandLine().getCommand();
        assertEquals(4, run.ranks);
        assertEquals(9, run.timeoutSeconds);
        assertTrue(run.noPrefix);
        assertEquals(List.of("python3", "-c", "print(1)", "--flag"), run.command);
        assertTrue(RunCommand.looksLikeMainClass(RankMain.class.getName()));
        assertFalse(RunCommand.looksLikeMainClass("python3"));
        assertFalse(RunCommand.looksLikeMainClass("org.example.DoesNotExist"));
    }

    @Test
    void shouldRefuseRemoteHosts() {
        assertEquals(1, Main.run("run", "-np", "2", "--hosts", "node17:2", "true"));
    }

    /** A main class the launcher test starts as ranks. */
    public static final class RankMain {
        private RankMain() {
        }

        /** Prints the rank, world size and arguments. */
        public static void main(String[] args) {
            System.out.println("rank " + System.getenv("JCCL_RANK") + "/" + System.getenv("JCCL_WORLD_SIZE")
                + " args " + List.of(args));
        }
    }
}
