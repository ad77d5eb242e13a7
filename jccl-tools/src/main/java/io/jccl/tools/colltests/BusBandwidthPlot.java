package io.jccl.tools.colltests;

import java.awt.BasicStroke;
import java.awt.Color;
import java.awt.Font;
import java.awt.Graphics2D;
import java.awt.RenderingHints;
import java.awt.geom.Path2D;
import java.awt.image.BufferedImage;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Bus bandwidth against message size, one line per series (an algorithm, a provider, a placement), written as SVG
 * (plain text, no dependencies) or PNG (drawn headless with java.awt). The x axis is logarithmic in size, as
 * nccl-tests sweeps are; the y axis is linear from 0.
 */
public final class BusBandwidthPlot {
    /** One point: a size in bytes and its bus bandwidth in GB/s. */
    public record Point(long sizeBytes, double busbwGBps) {
    }

    /** One line of the plot. */
    public record Series(String label, List<Point> points) {
    }

    private static final int WIDTH = 800;
    private static final int HEIGHT = 480;
    private static final int LEFT = 70;
    private static final int RIGHT = 20;
    private static final int TOP = 40;
    private static final int BOTTOM = 60;
    private static final String[] COLORS = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
        "#e377c2", "#7f7f7f"};

    private final String title;
    private final List<Series> series;
    private final long minSize;
    private final long maxSize;
    private final double maxBusbw;

    /** A plot of {@code series} (points with a size ≤ 0 are left out: a log axis cannot show them). */
    public BusBandwidthPlot(String title, List<Series> series) {
        this.title = title;
        List<Series> kept = new ArrayList<>();
        long min = Long.MAX_VALUE;
        long max = 0;
        double top = 0;
        for (Series s : series) {
            List<Point> points = s.points().stream().filter(p -> p.sizeBytes() > 0).toList();
            kept.add(new Series(s.label(), points));
            for (Point p : points) {
                min = Math.min(min, p.sizeBytes());
                max = Math.max(max, p.sizeBytes());
                top = Math.max(top, p.busbwGBps());
            }
        }
        if (max == 0) {
            throw new IllegalArgumentException("nothing to plot: no sizes above 0 bytes");
        }
        this.series = List.copyOf(kept);
        this.minSize = min;
        this.maxSize = Math.max(max, min * 2);
        this.maxBusbw = niceCeiling(top);
    }

    /** Writes the plot to {@code file}: {@code .svg} or {@code .png}. */
    public void write(Path file) throws IOException {
        String name = file.getFileName().toString().toLowerCase(Locale.ROOT);
        if (name.endsWith(".svg")) {
            Files.writeString(file, svg());
        } else if (name.endsWith(".png")) {
            writePng(file);
        } else {
            throw new IllegalArgumentException("--plot " + file + ": the file name must end in .svg or .png");
        }
    }

    double x(long size) {
        double span = Math.log(maxSize) - Math.log(minSize);
        return LEFT + (Math.log(size) - Math.log(minSize)) / span * (WIDTH - LEFT - RIGHT);
    }

    double y(double busbw) {
        return HEIGHT - BOTTOM - busbw / maxBusbw * (HEIGHT - TOP - BOTTOM);
    }

    /** The plot as an SVG document. */
    public String svg() {
        StringBuilder out = new StringBuilder();
        out.append(String.format(Locale.ROOT, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            + "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">%n", WIDTH, HEIGHT, WIDTH, HEIGHT));
        out.append(String.format(Locale.ROOT, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>%n", WIDTH, HEIGHT));
        out.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">"
            + "%s</text>%n", WIDTH / 2, escape(title)));
        for (double tick : yTicks()) {
            out.append(String.format(Locale.ROOT, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                + "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>%n", LEFT, WIDTH - RIGHT, y(tick), y(tick),
                LEFT - 6, y(tick) + 4, number(tick)));
        }
        for (long tick : xTicks()) {
            out.append(String.format(Locale.ROOT, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                + "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>%n", x(tick), x(tick), TOP,
                HEIGHT - BOTTOM, x(tick), HEIGHT - BOTTOM + 16, size(tick)));
        }
        out.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">message size "
            + "(bytes)</text>%n", (LEFT + WIDTH - RIGHT) / 2, HEIGHT - 18));
        out.append(String.format(Locale.ROOT, "<text x=\"16\" y=\"%d\" transform=\"rotate(-90 16 %d)\" "
            + "text-anchor=\"middle\">busbw (GB/s)</text>%n", (TOP + HEIGHT - BOTTOM) / 2, (TOP + HEIGHT - BOTTOM) / 2));
        for (int i = 0; i < series.size(); i++) {
            Series s = series.get(i);
            String color = COLORS[i % COLORS.length];
            StringBuilder points = new StringBuilder();
            for (Point p : s.points()) {
                points.append(String.format(Locale.ROOT, "%.1f,%.1f ", x(p.sizeBytes()), y(p.busbwGBps())));
            }
            out.append(String.format(Locale.ROOT, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                + "points=\"%s\"><title>%s</title></polyline>%n", color, points.toString().trim(), escape(s.label())));
            for (Point p : s.points()) {
                out.append(String.format(Locale.ROOT, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>%n",
                    x(p.sizeBytes()), y(p.busbwGBps()), color));
            }
            int ly = TOP + 16 + 16 * i;
            out.append(String.format(Locale.ROOT, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" "
                + "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">%s</text>%n", LEFT + 10, LEFT + 30, ly - 4, ly - 4,
                color, LEFT + 36, ly, escape(s.label())));
        }
        out.append("</svg>\n");
        return out.toString();
    }

    private void writePng(Path file) throws IOException {
        System.setProperty("java.awt.headless", "true");
        BufferedImage image = new BufferedImage(WIDTH, HEIGHT, BufferedImage.TYPE_INT_RGB);
        Graphics2D g = image.createGraphics();
        try {
            g.setRenderingHint(RenderingHints.KEY_ANTIALIASING, RenderingHints.VALUE_ANTIALIAS_ON);
            g.setColor(Color.WHITE);
            g.fillRect(0, 0, WIDTH, HEIGHT);
            g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 12));
            for (double tick : yTicks()) {
                g.setColor(new Color(0xdd, 0xdd, 0xdd));
                g.drawLine(LEFT, (int) y(tick), WIDTH - RIGHT, (int) y(tick));
                g.setColor(Color.BLACK);
                String label = number(tick);
                g.drawString(label, LEFT - 6 - g.getFontMetrics().stringWidth(label), (int) y(tick) + 4);
            }
            for (long tick : xTicks()) {
                g.setColor(new Color(0xdd, 0xdd, 0xdd));
                g.drawLine((int) x(tick), TOP, (int) x(tick), HEIGHT - BOTTOM);
                g.setColor(Color.BLACK);
                String label = size(tick);
                g.drawString(label, (int) x(tick) - g.getFontMetrics().stringWidth(label) / 2, HEIGHT - BOTTOM + 16);
            }
            g.drawString("message size (bytes)", (LEFT + WIDTH - RIGHT) / 2 - 50, HEIGHT - 18);
            g.drawString("busbw (GB/s)", 4, TOP - 8);
            g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 15));
            g.drawString(title, (WIDTH - g.getFontMetrics().stringWidth(title)) / 2, 20);
            g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 12));
            for (int i = 0; i < series.size(); i++) {
                Series s = series.get(i);
                g.setColor(Color.decode(COLORS[i % COLORS.length]));
                g.setStroke(new BasicStroke(2f));
                Path2D.Double line = new Path2D.Double();
                for (Point p : s.points()) {
                    if (line.getCurrentPoint() == null) {
                        line.moveTo(x(p.sizeBytes()), y(p.busbwGBps()));
                    } else {
                        line.lineTo(x(p.sizeBytes()), y(p.busbwGBps()));
                    }
                    g.fillOval((int) x(p.sizeBytes()) - 3, (int) y(p.busbwGBps()) - 3, 6, 6);
                }
                g.draw(line);
                int ly = TOP + 16 + 16 * i;
                g.drawLine(LEFT + 10, ly - 4, LEFT + 30, ly - 4);
                g.setColor(Color.BLACK);
                g.drawString(s.label(), LEFT + 36, ly);
            }
        } finally {
            g.dispose();
        }
        if (!javax.imageio.ImageIO.write(image, "png", file.toFile())) {
            throw new IOException("no PNG writer in this JDK");
        }
    }

    private List<Double> yTicks() {
        List<Double> ticks = new ArrayList<>();
        double step = maxBusbw / 5;
        for (int i = 0; i <= 5; i++) {
            ticks.add(step * i);
        }
        return ticks;
    }

    private List<Long> xTicks() {
        List<Long> ticks = new ArrayList<>();
        int every = Math.max(1, (int) Math.ceil((Math.log(maxSize) - Math.log(minSize)) / Math.log(2) / 10));
        int i = 0;
        for (long s = Long.highestOneBit(minSize) == minSize ? minSize : Long.highestOneBit(minSize) * 2;
             s <= maxSize && s > 0; s *= 2, i++) {
            if (i % every == 0) {
                ticks.add(s);
            }
        }
        return ticks;
    }

    /** 1, 2, 5 × 10^k at or above {@code value} (1 for nothing). */
    static double niceCeiling(double value) {
        if (!(value > 0)) {
            return 1;
        }
        double magnitude = Math.pow(10, Math.floor(Math.log10(value)));
        for (double m : new double[] {1, 2, 5, 10}) {
            if (m * magnitude >= value) {
                return m * magnitude;
            }
        }
        return 10 * magnitude;
    }

    /** 4, 1K, 64M: nccl-tests' size suffixes (powers of 1024). */
    static String size(long bytes) {
        if (bytes >= (1L << 30) && bytes % (1L << 30) == 0) {
            return (bytes >> 30) + "G";
        }
        if (bytes >= (1L << 20) && bytes % (1L << 20) == 0) {
            return (bytes >> 20) + "M";
        }
        if (bytes >= 1024 && bytes % 1024 == 0) {
            return (bytes >> 10) + "K";
        }
        return Long.toString(bytes);
    }

    private static String number(double v) {
        return v == Math.rint(v) ? Long.toString((long) v) : String.format(Locale.ROOT, "%.2g", v);
    }

    private static String escape(String text) {
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
    }
}
