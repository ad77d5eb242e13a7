package io.jccl.examples.digits;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.zip.GZIPInputStream;

/**
 * The 8×8 handwritten-digits set shipped with JCCL (UCI "Optical Recognition of Handwritten Digits", CC BY 4.0,
 * see DIGITS-LICENSE.txt): 1797 images of 64 pixels (0..16) with their digit. Pixels are scaled to [0, 1] and the
 * set is split into train and test parts with a fixed seed, so every rank sees the same split.
 *
 * @param trainFeatures training images, row-major, 64 floats each
 * @param trainLabels training digits
 * @param testFeatures test images
 * @param testLabels test digits
 */
public record DigitsDataset(float[][] trainFeatures, int[] trainLabels, float[][] testFeatures, int[] testLabels) {
    /** Pixels per image. */
    public static final int FEATURES = 64;
    /** Digits 0..9. */
    public static final int CLASSES = 10;

    /** Loads the shipped set and splits off {@code testCount} images for testing (seeded shuffle). */
    public static DigitsDataset load(int testCount, long seed) {
        List<float[]> features = new ArrayList<>();
        List<Integer> labels = new ArrayList<>();
        try (InputStream raw = DigitsDataset.class.getResourceAsStream("digits.csv.gz")) {
            if (raw == null) {
                throw new IllegalStateException("digits.csv.gz is missing from the class path");
            }
            BufferedReader reader = new BufferedReader(new InputStreamReader(new GZIPInputStream(raw),
                StandardCharsets.US_ASCII));
            String line;
            while ((line = reader.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                String[] cells = line.split(",");
                if (cells.length != FEATURES + 1) {
                    throw new IllegalStateException("digits.csv.gz: expected 65 columns, found " + cells.length);
                }
                float[] image = new float[FEATURES];
                for (int i = 0; i < FEATURES; i++) {
                    image[i] = Integer.parseInt(cells[i]) / 16f;
                }
                features.add(image);
                labels.add(Integer.parseInt(cells[FEATURES]));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        int n = features.size();
        int[] order = new int[n];
        for (int i = 0; i < n; i++) {
            order[i] = i;
        }
        shuffle(order, new Random(seed));
        int trainCount = n - testCount;
        float[][] trainX = new float[trainCount][];
        int[] trainY = new int[trainCount];
        float[][] testX = new float[testCount][];
        int[] testY = new int[testCount];
        for (int i = 0; i < n; i++) {
            if (i < trainCount) {
                trainX[i] = features.get(order[i]);
                trainY[i] = labels.get(order[i]);
            } else {
                testX[i - trainCount] = features.get(order[i]);
                testY[i - trainCount] = labels.get(order[i]);
            }
        }
        return new DigitsDataset(trainX, trainY, testX, testY);
    }

    /** Fisher–Yates shuffle with the given generator. */
    public static void shuffle(int[] values, Random random) {
        for (int i = values.length - 1; i > 0; i--) {
            int j = random.nextInt(i + 1);
            int t = values[i];
            values[i] = values[j];
            values[j] = t;
        }
    }
}
