package io.jccl.tools.launcher;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.List;
import java.util.Map;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The launcher's AOT cache handling: which commands qualify, keys, use / train / off, and one real round trip. */
class AotCacheTest {
    private static final String JAVA = Path.of(System.getProperty("java.home"), "bin", "java").toString();

    @TempDir
    Path dir;

    private Path jar(String name) throws IOException {
        Path jar = dir.resolve(name);
        try (OutputStream os = Files.newOutputStream(jar); JarOutputStream jos = new JarOutputStream(os)) {
            String entry = AotProbeMain.class.getName().replace('.', '/') + ".class";
            jos.putNextEntry(new JarEntry(entry));
            try (InputStream in = AotProbeMain.class.getClassLoader().getResourceAsStream(entry)) {
                in.transferTo(jos);
            }
            jos.closeEntry();
        }
        return jar;
    }

    private List<String> command(Path jar) {
        return List.of(JAVA, "-Xss2m", "--enable-native-access=ALL-UNNAMED", "-cp", jar.toString(),
            AotProbeMain.class.getName(), "arg");
    }

    @Test
    void shouldRecogniseOnlyClassPathJavaLaunches() throws IOException {
        Path jar = jar("a.jar");
        AotCache.JavaCommand java = AotCache.JavaCommand.parse(command(jar), Map.of());
        assertNotNull(java);
        assertEquals(List.of("-Xss2m", "--enable-native-access=ALL-UNNAMED", "-cp", jar.toString()),
            java.options());
        assertEquals(List.of(jar), java.classPath());
        assertEquals(AotProbeMain.class.getName(), java.main());
        assertNull(AotCache.JavaCommand.parse(List.of("sh", "-c", "java -cp x Main"), Map.of()), "not java itself");
        assertNull(AotCache.JavaCommand.parse(List.of(JAVA, "-cp", jar.toString(), "Main.java"), Map.of()),
            "source launcher");
        assertNull(AotCache.JavaCommand.parse(List.of(JAVA, "-p", "mods", "-m", "m/Main"), Map.of()), "module");
        assertNull(AotCache.JavaCommand.parse(List.of(JAVA, "-XX:AOTCache=x.aot", "-cp", jar.toString(), "Main"),
            Map.of()), "the user's own AOT settings win");
        assertNull(AotCache.JavaCommand.parse(List.of(JAVA, "-cp", dir.toString(), "Main"), Map.of()),
            "class directories cannot be cached");
        assertNull(AotCache.JavaCommand.parse(List.of(JAVA, "-version"), Map.of()));
        AotCache.JavaCommand jarLaunch = AotCache.JavaCommand.parse(List.of(JAVA, "-jar", jar.toString(), "x"),
            Map.of());
        assertNotNull(jarLaunch);
        assertEquals(List.of(jar), jarLaunch.classPath());
    }

    @Test
    void shouldExpandClassPathWildcards() throws IOException {
        Path lib = Files.createDirectories(dir.resolve("lib"));
        Files.writeString(lib.resolve("b.jar"), "x");
        Files.writeString(lib.resolve("a.jar"), "x");
        Files.writeString(lib.resolve("notes.txt"), "x");
        assertEquals(List.of(lib.resolve("a.jar"), lib.resolve("b.jar")), AotCache.JavaCommand.expand(lib + "/*"));
    }

    @Test
    void shouldKeyOnJarsMainAndModuleOptionsButNotProperties() throws IOException {
        Path jar = jar("a.jar");
        String key = AotCache.key(AotCache.JavaCommand.parse(command(jar), Map.of()), Map.of());
        List<String> withProperty = List.of(JAVA, "-Dfoo=bar", "--enable-native-access=ALL-UNNAMED", "-cp",
            jar.toString(), AotProbeMain.class.getName());
        assertEquals(key, AotCache.key(AotCache.JavaCommand.parse(withProperty, Map.of()), Map.of()));
        List<String> otherModules = List.of(JAVA, "--enable-native-access=ALL-UNNAMED", "--add-modules",
            "jdk.incubator.vector", "-cp", jar.toString(), AotProbeMain.class.getName());
        assertNotEquals(key, AotCache.key(AotCache.JavaCommand.parse(otherModules, Map.of()), Map.of()));
        List<String> otherMain = List.of(JAVA, "--enable-native-access=ALL-UNNAMED", "-cp", jar.toString(), "x.Y");
        assertNotEquals(key, AotCache.key(AotCache.JavaCommand.parse(otherMain, Map.of()), Map.of()));
        assertNotEquals(key, AotCache.key(AotCache.JavaCommand.parse(command(jar), Map.of()),
            Map.of("JDK_JAVA_OPTIONS", "-Xmx1g")));
        // A rebuilt jar (new time) is a new key: the old cache is never offered for it.
        Files.setLastModifiedTime(jar, FileTime.fromMillis(Files.getLastModifiedTime(jar).toMillis() - 10_000));
        assertNotEquals(key, AotCache.key(AotCache.JavaCommand.parse(command(jar), Map.of()), Map.of()));
    }

    @Test
    void shouldTrainWithRankZeroThenUseTheCacheOnEveryRank() throws IOException {
        Path jar = jar("a.jar");
        AotCache aot = new AotCache(dir.resolve("aot"), null);
        List<String> cmd = command(jar);
        AotCache.Plan train = aot.plan(cmd, Map.of());
        assertEquals(AotCache.Mode.TRAIN, train.mode());
        List<String> rank0 = train.commandFor(0, cmd);
        assertEquals(JAVA, rank0.getFirst());
        assertTrue(rank0.contains("-XX:AOTMode=record"), rank0.toString());
        assertTrue(rank0.contains("-XX:AOTConfiguration=" + train.config()), rank0.toString());
        assertEquals(cmd, train.commandFor(1, cmd), "only rank 0 records");
        assertTrue(train.isJvmNote(0, " AOTConfiguration recorded: x.aotconf"));
        assertFalse(train.isJvmNote(1, " AOTConfiguration recorded: x.aotconf"));

        Files.write(train.cache(), new byte[] {1});
        AotCache.Plan use = aot.plan(cmd, Map.of());
        assertEquals(AotCache.Mode.USE, use.mode());
        for (int r = 0; r < 2; r++) {
            List<String> c = use.commandFor(r, cmd);
            assertEquals("-XX:AOTCache=" + train.cache(), c.get(1));
            assertTrue(c.contains("-Xlog:aot*=off"), "a refused cache is skipped silently");
            assertEquals(cmd.subList(1, cmd.size()), c.subList(c.size() - cmd.size() + 1, c.size()));
        }
        assertFalse(use.isJvmNote(0, " AOTConfiguration recorded: x"));
        // JCCL_DEBUG=TRACE: the JVM's AOT warnings reach stderr instead of being switched off.
        List<String> traced = new AotCache(dir.resolve("aot"), null, true).plan(cmd, Map.of()).commandFor(1, cmd);
        assertTrue(traced.contains("-Xlog:aot=warning:stderr"), traced.toString());
        assertFalse(traced.contains("-Xlog:aot*=off"), traced.toString());

        // Stale: the jar changes, the old cache is not used, a new training starts.
        Files.setLastModifiedTime(jar, FileTime.fromMillis(Files.getLastModifiedTime(jar).toMillis() + 10_000));
        assertEquals(AotCache.Mode.TRAIN, aot.plan(cmd, Map.of()).mode());
    }

    @Test
    void shouldNotRetryAFailedTrainingAndLeaveOtherCommandsAlone() throws IOException {
        Path jar = jar("a.jar");
        AotCache aot = new AotCache(dir.resolve("aot"), null);
        AotCache.Plan train = aot.plan(command(jar), Map.of());
        aot.finish(train, 0); // exit 0 but no recording: a failed training
        assertEquals(AotCache.Mode.NONE, aot.plan(command(jar), Map.of()).mode());
        List<String> sh = List.of("sh", "-c", "true");
        AotCache.Plan none = aot.plan(sh, Map.of());
        assertEquals(AotCache.Mode.NONE, none.mode());
        assertEquals(sh, none.commandFor(0, sh));
    }

    @Test
    void shouldBeOffWithJcclAotZeroOrWithoutADirectory() {
        PrintStream err = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        assertNull(AotCache.fromEnvironment(Map.of("JCCL_AOT", "0", "JCCL_AOT_DIR", dir.toString()), err));
        AotCache on = AotCache.fromEnvironment(Map.of("JCCL_AOT_DIR", dir.toString()), err);
        assertNotNull(on);
        assertEquals(dir, on.directory());
        AotCache trace = AotCache.fromEnvironment(Map.of("JCCL_AOT_DIR", "rel/aot", "JCCL_DEBUG", "TRACE"), err);
        assertTrue(trace.directory().isAbsolute(), "ranks may run elsewhere: " + trace.directory());
        String home = System.getProperty("jccl.home");
        try {
            System.clearProperty("jccl.home");
            assertNull(AotCache.fromEnvironment(Map.of(), err), "no ./jccl home and no JCCL_AOT_DIR: off");
        } finally {
            if (home != null) {
                System.setProperty("jccl.home", home);
            }
        }
    }

    @Test
    void shouldLeaveTheCommandUnchangedWhenOff() throws Exception {
        Path jar = jar("a.jar");
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        PrintStream ps = new PrintStream(out, true, StandardCharsets.UTF_8);
        Launcher.Result r = Launcher.builder().ranks(1).command(command(jar)).out(ps).err(ps)
            .aotCache(AotCache.fromEnvironment(Map.of("JCCL_AOT", "0", "JCCL_AOT_DIR", dir.toString()), ps))
            .build().run();
        assertEquals(0, r.exitCode());
        assertTrue(out.toString(StandardCharsets.UTF_8).contains("aot-args= rank=0"), out.toString());
        assertFalse(Files.exists(dir.resolve("aot")));
    }

    /** A real JDK round trip: the first job trains (cache file appears), the second starts both ranks from it. */
    @Test
    void shouldWriteACacheOnTheFirstRunAndUseItOnTheNext() throws Exception {
        Path jar = jar("a.jar");
        Path aotDir = dir.resolve("aot");
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        PrintStream ps = new PrintStream(out, true, StandardCharsets.UTF_8);
        Launcher.Result first = Launcher.builder().ranks(2).command(command(jar)).out(ps).err(ps)
            .aotCache(new AotCache(aotDir, ps)).build().run();
        assertEquals(0, first.exitCode(), out.toString(StandardCharsets.UTF_8));
        String firstOut = out.toString(StandardCharsets.UTF_8);
        assertTrue(firstOut.contains("-XX:AOTMode=record"), firstOut);
        assertFalse(firstOut.contains("AOTConfiguration recorded"), "the JVM's note is dropped: " + firstOut);
        try (var files = Files.list(aotDir)) {
            List<Path> caches = files.filter(p -> p.toString().endsWith(".aot")).toList();
            assertEquals(1, caches.size(), firstOut);
            assertTrue(Files.size(caches.getFirst()) > 0);
        }
        try (var files = Files.list(aotDir)) {
            assertTrue(files.noneMatch(p -> p.toString().endsWith(".aotconf") || p.toString().endsWith(".tmp")),
                "recording and temporary files are removed");
        }
        out.reset();
        Launcher.Result second = Launcher.builder().ranks(2).command(command(jar)).out(ps).err(ps)
            .aotCache(new AotCache(aotDir, ps)).build().run();
        assertEquals(0, second.exitCode());
        String secondOut = out.toString(StandardCharsets.UTF_8);
        assertTrue(secondOut.contains("[0] aot-args=-XX:AOTCache="), secondOut);
        assertTrue(secondOut.contains("[1] aot-args=-XX:AOTCache="), secondOut);
        assertFalse(secondOut.contains("error"), secondOut);
    }
}
