package io.jccl.tools.colltests;

import io.jccl.tools.Json;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code jccl tests --plot} / {@code jccl plot}: the drawing and reading runs back from their JSON. */
class PlotCommandTest {
    @TempDir
    Path dir;

    private static Map<String, Object> run(String label, double scale) {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("test", "all_reduce_perf");
        doc.put("label", label);
        doc.put("ranks", 2);
        List<Object> rows = new java.util.ArrayList<>();
        for (long size = 1024; size <= (1 << 20); size *= 32) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("size", size);
            row.put("out_of_place", Map.of("busbw_GBps", scale * Math.log(size)));
            row.put("in_place", Map.of("busbw_GBps", 2 * scale * Math.log(size)));
            rows.add(row);
        }
        doc.put("results", rows);
        return doc;
    }

    @Test
    void shouldDrawOneLinePerRunWithItsLabel() throws Exception {
        Path ring = dir.resolve("ring.json");
        Path tree = dir.resolve("tree.json");
        Files.writeString(ring, Json.write(run("shm0 ring", 1)));
        Files.writeString(tree, Json.write(run("shm0 <tree>", 0.5)));
        Path svg = dir.resolve("out.svg");
        PlotCommand command = new PlotCommand();
        command.out = new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8);
        assertEquals(0, new CommandLine(command).execute("-o", svg.toString(), ring.toString(), tree.toString()));
        String text = Files.readString(svg);
        assertEquals(2, text.split("<polyline", -1).length - 1, text);
        assertTrue(text.contains(">shm0 ring<"), text);
        assertTrue(text.contains("shm0 &lt;tree&gt;"), "labels are escaped: " + text);
        assertTrue(text.contains("all_reduce_perf, 2 ranks, out-of-place"), text);
        assertTrue(text.contains(">1K<") && text.contains(">1M<"), "size ticks with nccl-tests suffixes: " + text);

        Path inPlace = dir.resolve("in.svg");
        assertEquals(0, new CommandLine(command).execute("--in-place", "-o", inPlace.toString(), ring.toString()));
        assertNotEquals(Files.readString(inPlace).replace("in-place", "out-of-place"), text,
            "--in-place plots the other columns");
    }

    @Test
    void shouldWritePngAndRefuseOtherExtensionsAndNonResults() throws Exception {
        Path png = dir.resolve("out.png");
        new BusBandwidthPlot("t", List.of(new BusBandwidthPlot.Series("a", List.of(
            new BusBandwidthPlot.Point(8, 0.1), new BusBandwidthPlot.Point(1 << 20, 12.5))))).write(png);
        byte[] head = java.util.Arrays.copyOf(Files.readAllBytes(png), 8);
        assertArrayEquals(new byte[] {(byte) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, head);
        assertThrows(IllegalArgumentException.class, () -> new BusBandwidthPlot("t", List.of(
            new BusBandwidthPlot.Series("a", List.of(new BusBandwidthPlot.Point(8, 1))))).write(dir.resolve("x.jpg")));
        Path bogus = dir.resolve("bogus.json");
        Files.writeString(bogus, "{\"test\": 1}");
        PlotCommand command = new PlotCommand();
        PrintStream err = System.err;
        System.setErr(new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
        try {
            assertNotEquals(0, new CommandLine(command).execute("-o", dir.resolve("b.svg").toString(),
                bogus.toString()));
        } finally {
            System.setErr(err);
        }
    }

    @Test
    void shouldScaleAxesToTheData() {
        BusBandwidthPlot plot = new BusBandwidthPlot("t", List.of(new BusBandwidthPlot.Series("a", List.of(
            new BusBandwidthPlot.Point(8, 0), new BusBandwidthPlot.Point(8 << 20, 7.3)))));
        assertEquals(70.0, plot.x(8), 1e-9);
        assertEquals(780.0, plot.x(8 << 20), 1e-9);
        assertEquals(10.0, BusBandwidthPlot.niceCeiling(7.3));
        assertEquals(0.2, BusBandwidthPlot.niceCeiling(0.15), 1e-12);
        assertEquals(420.0, plot.y(0), 1e-9);
        assertEquals("64M", BusBandwidthPlot.size(64L << 20));
    }

    @Test
    void shouldReadBackWhatTheJsonWriterWrites() {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("s", "quote \" back\\slash \n tab\t");
        doc.put("n", 1.5);
        doc.put("l", List.of(1, true, false));
        doc.put("z", null);
        Object parsed = Json.parse(Json.write(doc));
        assertEquals(Map.of("s", "quote \" back\\slash \n tab\t", "n", 1.5, "l", List.of(1.0, true, false)),
            Map.of("s", ((Map<?, ?>) parsed).get("s"), "n", ((Map<?, ?>) parsed).get("n"), "l",
                ((Map<?, ?>) parsed).get("l")));
        assertTrue(((Map<?, ?>) parsed).containsKey("z"));
        assertThrows(IllegalArgumentException.class, () -> Json.parse("{\"a\": }"));
        assertThrows(IllegalArgumentException.class, () -> Json.parse("[1, 2"));
    }
}
