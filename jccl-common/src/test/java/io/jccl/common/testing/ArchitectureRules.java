package io.jccl.common.testing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.classfile.AnnotationValue;
import java.lang.classfile.Attribute;
import java.lang.classfile.AttributedElement;
import java.lang.classfile.ClassFile;
import java.lang.classfile.ClassModel;
import java.lang.classfile.ClassSignature;
import java.lang.classfile.CodeElement;
import java.lang.classfile.FieldModel;
import java.lang.classfile.MethodModel;
import java.lang.classfile.MethodSignature;
import java.lang.classfile.Signature;
import java.lang.classfile.TypeAnnotation;
import java.lang.classfile.attribute.AnnotationDefaultAttribute;
import java.lang.classfile.attribute.CodeAttribute;
import java.lang.classfile.attribute.RecordAttribute;
import java.lang.classfile.attribute.RecordComponentInfo;
import java.lang.classfile.attribute.RuntimeInvisibleAnnotationsAttribute;
import java.lang.classfile.attribute.RuntimeInvisibleParameterAnnotationsAttribute;
import java.lang.classfile.attribute.RuntimeInvisibleTypeAnnotationsAttribute;
import java.lang.classfile.attribute.RuntimeVisibleAnnotationsAttribute;
import java.lang.classfile.attribute.RuntimeVisibleParameterAnnotationsAttribute;
import java.lang.classfile.attribute.RuntimeVisibleTypeAnnotationsAttribute;
import java.lang.classfile.attribute.SignatureAttribute;
import java.lang.classfile.constantpool.ClassEntry;
import java.lang.classfile.constantpool.MethodTypeEntry;
import java.lang.classfile.constantpool.NameAndTypeEntry;
import java.lang.classfile.constantpool.PoolEntry;
import java.lang.classfile.instruction.LocalVariable;
import java.lang.classfile.instruction.LocalVariableType;
import java.lang.constant.ClassDesc;
import java.lang.constant.MethodTypeDesc;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import java.util.SortedMap;
import java.util.SortedSet;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Consumer;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * The layering rules of docs/ARCHITECTURE.md as checks on compiled code, shared by every module's
 * {@code ArchitectureTest} through the jccl-common test-jar.
 *
 * <p>{@link #references(Path)} reads every {@code .class} file under a folder (or jar-less class tree) with the JDK's
 * class-file API and collects every class it refers to: the constant pool's class entries (super types, interfaces,
 * owners of called methods and accessed fields, {@code new}, casts, {@code instanceof}, class literals, catch types,
 * nest and inner-class entries), every field, method, name-and-type and method-type descriptor, generic signatures
 * (type arguments and bounds too), annotations (on classes, fields, methods, parameters, record components and types,
 * with their class and enum values) and the types of local variables. A {@link Rule} then says which of the referenced
 * packages are allowed, and {@link Rule#check(Path)} fails naming each offending class, what it references and the
 * rule.
 *
 * <p>What it does not see: names in strings ({@code Class.forName("io.jccl.transport.shm.ShmProvider")}, service
 * files). Those are run-time lookups, which the layering permits; only compiled dependencies are checked.
 *
 * <p>Package patterns: {@code "io.jccl.verbs"} is that package only; {@code "io.jccl.common.."} is the package and
 * every package under it.
 */
public final class ArchitectureRules {
    private ArchitectureRules() {
    }

    /** A new rule; {@code statement} is what a failure says first, e.g. "providers depend only on the verbs API". */
    public static Rule rule(String statement) {
        return new Rule(statement);
    }

    /**
     * The rule every provider module follows: the verbs API, its SPI, jccl-common and its own package tree
     * ({@code ownPackage}), never another provider, the collectives, the tools, the examples or the benchmarks.
     */
    public static Rule providerRule(String ownPackage) {
        return rule("providers depend only on the verbs API, its SPI and jccl-common")
            .allow("io.jccl.verbs", "io.jccl.verbs.spi", "io.jccl.common..", ownPackage + "..");
    }

    /** The module's compiled main classes: {@code target/classes} under the module being tested. */
    public static Path mainClasses() {
        return moduleDirectory().resolve("target").resolve("classes");
    }

    /** The module's compiled test classes: {@code target/test-classes} under the module being tested. */
    public static Path testClasses() {
        return moduleDirectory().resolve("target").resolve("test-classes");
    }

    /** The module's main sources: {@code src/main/java} under the module being tested. */
    public static Path mainSources() {
        return moduleDirectory().resolve("src").resolve("main").resolve("java");
    }

    /** The module being tested: Maven's {@code basedir} (Surefire sets it), else the working directory. */
    public static Path moduleDirectory() {
        return Path.of(System.getProperty("basedir", System.getProperty("user.dir"))).toAbsolutePath();
    }

    /** One reference that a rule forbids. */
    public record Violation(String rule, String origin, String target) {
        @Override
        public String toString() {
            return rule + ": " + origin + " references " + target;
        }
    }

    /**
     * Which referenced packages a module may use. A referenced class is checked when its package matches one of
     * {@link #governs(String...)} (by default {@code io.jccl..}) and is allowed when it matches one of
     * {@link #allow(String...)}.
     */
    public static final class Rule {
        private final String statement;
        private final List<String> governed = new ArrayList<>(List.of("io.jccl.."));
        private final List<String> allowed = new ArrayList<>();

        private Rule(String statement) {
            this.statement = statement;
        }

        /** Replaces the packages this rule looks at (default {@code io.jccl..}); {@code ".."} is every package. */
        public Rule governs(String... patterns) {
            governed.clear();
            governed.addAll(List.of(patterns));
            return this;
        }

        /** Adds packages the module may reference. */
        public Rule allow(String... patterns) {
            allowed.addAll(List.of(patterns));
            return this;
        }

        /** True when a class of {@code packageName} may be referenced. */
        public boolean allows(String packageName) {
            return !matchesAny(governed, packageName) || matchesAny(allowed, packageName);
        }

        /** Every forbidden reference of the classes under {@code classes}, sorted by origin then target. */
        public List<Violation> violationsIn(Path classes) {
            return violationsIn(references(classes));
        }

        /** Every forbidden reference in {@code references} (class name to the classes it references). */
        public List<Violation> violationsIn(SortedMap<String, SortedSet<String>> references) {
            List<Violation> found = new ArrayList<>();
            references.forEach((origin, targets) -> {
                for (String target : targets) {
                    if (!allows(packageOf(target))) {
                        found.add(new Violation(statement, origin, target));
                    }
                }
            });
            return found;
        }

        /**
         * Fails with every forbidden reference of the classes under {@code classes}, one line each
         * ("rule: origin references target"); also fails when there is no class to scan, since a rule that scans
         * nothing cannot fail.
         */
        public void check(Path classes) {
            SortedMap<String, SortedSet<String>> references = references(classes);
            if (references.isEmpty()) {
                throw new AssertionError(statement + ": no class files under " + classes
                    + " (build the module first); a rule that scans nothing proves nothing");
            }
            List<Violation> violations = violationsIn(references);
            if (!violations.isEmpty()) {
                throw new AssertionError(violations.size() + " forbidden reference(s) in " + classes + "\n"
                    + violations.stream().map(v -> "  " + v).collect(Collectors.joining("\n"))
                    + "\n(allowed: " + String.join(", ", allowed) + "; checked: " + String.join(", ", governed)
                    + "; " + references.size() + " classes scanned)");
            }
        }

        @Override
        public String toString() {
            return statement + " (checks " + governed + ", allows " + allowed + ")";
        }
    }

    /** True when {@code packageName} matches {@code pattern} ("a.b" exactly, "a.b.." that package and below). */
    public static boolean matches(String pattern, String packageName) {
        if (pattern.equals("..")) {
            return true;
        }
        if (pattern.endsWith("..")) {
            String root = pattern.substring(0, pattern.length() - 2);
            return packageName.equals(root) || packageName.startsWith(root + ".");
        }
        return packageName.equals(pattern);
    }

    private static boolean matchesAny(Collection<String> patterns, String packageName) {
        for (String pattern : patterns) {
            if (matches(pattern, packageName)) {
                return true;
            }
        }
        return false;
    }

    /** The package of a binary class name ({@code io.jccl.verbs.Verbs$1} → {@code io.jccl.verbs}). */
    public static String packageOf(String className) {
        int dot = className.lastIndexOf('.');
        return dot < 0 ? "" : className.substring(0, dot);
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Reading class files
    // ---------------------------------------------------------------------------------------------------------------

    /**
     * Every class under {@code classes} (binary name, e.g. {@code io.jccl.verbs.Verbs$1}) with the classes it
     * references, itself excluded; empty when the folder does not exist.
     */
    public static SortedMap<String, SortedSet<String>> references(Path classes) {
        SortedMap<String, SortedSet<String>> all = new TreeMap<>();
        if (!Files.isDirectory(classes)) {
            return all;
        }
        List<Path> files;
        try (Stream<Path> walk = Files.walk(classes)) {
            files = walk.filter(p -> p.getFileName().toString().endsWith(".class"))
                .filter(p -> !p.getFileName().toString().equals("module-info.class"))
                .filter(Files::isRegularFile)
                .sorted()
                .toList();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot list " + classes, e);
        }
        for (Path file : files) {
            try {
                ClassModel model = ClassFile.of().parse(Files.readAllBytes(file));
                String name = binaryName(model.thisClass().asSymbol());
                SortedSet<String> targets = referencesOf(model);
                targets.remove(name);
                all.computeIfAbsent(name, k -> new TreeSet<>()).addAll(targets);
            } catch (IOException e) {
                throw new UncheckedIOException("cannot read " + file, e);
            } catch (IllegalArgumentException e) {
                throw new IllegalStateException("cannot parse " + file + ": " + e.getMessage(), e);
            }
        }
        return all;
    }

    /** Every class one class file references (binary names; arrays as their element class; no primitives). */
    public static SortedSet<String> referencesOf(byte[] classFile) {
        return referencesOf(ClassFile.of().parse(classFile));
    }

    private static SortedSet<String> referencesOf(ClassModel model) {
        SortedSet<String> out = new TreeSet<>();
        Consumer<ClassDesc> sink = desc -> addClass(out, desc);
        for (PoolEntry entry : model.constantPool()) {
            switch (entry) {
                case ClassEntry c -> sink.accept(c.asSymbol());
                case NameAndTypeEntry nat -> addDescriptor(sink, nat.type().stringValue());
                case MethodTypeEntry mt -> addMethodType(sink, mt.asSymbol());
                default -> {
                }
            }
        }
        attributes(model, Kind.CLASS, sink);
        for (FieldModel field : model.fields()) {
            sink.accept(field.fieldTypeSymbol());
            attributes(field, Kind.FIELD, sink);
        }
        for (MethodModel method : model.methods()) {
            addMethodType(sink, method.methodTypeSymbol());
            attributes(method, Kind.METHOD, sink);
        }
        return out;
    }

    private enum Kind { CLASS, FIELD, METHOD, CODE }

    private static void attributes(AttributedElement element, Kind kind, Consumer<ClassDesc> sink) {
        for (Attribute<?> attribute : element.attributes()) {
            switch (attribute) {
                case SignatureAttribute s -> {
                    switch (kind) {
                        case CLASS -> classSignature(sink, s.asClassSignature());
                        case METHOD -> methodSignature(sink, s.asMethodSignature());
                        default -> signature(sink, s.asTypeSignature());
                    }
                }
                case RuntimeVisibleAnnotationsAttribute a -> a.annotations().forEach(x -> annotation(sink, x));
                case RuntimeInvisibleAnnotationsAttribute a -> a.annotations().forEach(x -> annotation(sink, x));
                case RuntimeVisibleParameterAnnotationsAttribute a ->
                    a.parameterAnnotations().forEach(list -> list.forEach(x -> annotation(sink, x)));
                case RuntimeInvisibleParameterAnnotationsAttribute a ->
                    a.parameterAnnotations().forEach(list -> list.forEach(x -> annotation(sink, x)));
                case RuntimeVisibleTypeAnnotationsAttribute a ->
                    a.annotations().forEach(x -> typeAnnotation(sink, x));
                case RuntimeInvisibleTypeAnnotationsAttribute a ->
                    a.annotations().forEach(x -> typeAnnotation(sink, x));
                case AnnotationDefaultAttribute a -> annotationValue(sink, a.defaultValue());
                case RecordAttribute r -> {
                    for (RecordComponentInfo component : r.components()) {
                        sink.accept(component.descriptorSymbol());
                        attributes(component, Kind.FIELD, sink);
                    }
                }
                case CodeAttribute code -> {
                    for (CodeElement e : code) {
                        switch (e) {
                            case LocalVariable v -> sink.accept(v.typeSymbol());
                            case LocalVariableType v -> signature(sink, v.signatureSymbol());
                            default -> {
                            }
                        }
                    }
                    attributes(code, Kind.CODE, sink);
                }
                default -> {
                }
            }
        }
    }

    private static void annotation(Consumer<ClassDesc> sink, java.lang.classfile.Annotation annotation) {
        sink.accept(annotation.classSymbol());
        annotation.elements().forEach(e -> annotationValue(sink, e.value()));
    }

    private static void typeAnnotation(Consumer<ClassDesc> sink, TypeAnnotation annotation) {
        annotation(sink, annotation.annotation());
    }

    private static void annotationValue(Consumer<ClassDesc> sink, AnnotationValue value) {
        switch (value) {
            case AnnotationValue.OfClass c -> sink.accept(c.classSymbol());
            case AnnotationValue.OfEnum e -> sink.accept(e.classSymbol());
            case AnnotationValue.OfAnnotation a -> annotation(sink, a.annotation());
            case AnnotationValue.OfArray a -> a.values().forEach(v -> annotationValue(sink, v));
            default -> {
            }
        }
    }

    private static void classSignature(Consumer<ClassDesc> sink, ClassSignature signature) {
        signature.typeParameters().forEach(p -> typeParameter(sink, p));
        signature(sink, signature.superclassSignature());
        signature.superinterfaceSignatures().forEach(s -> signature(sink, s));
    }

    private static void methodSignature(Consumer<ClassDesc> sink, MethodSignature signature) {
        signature.typeParameters().forEach(p -> typeParameter(sink, p));
        signature.arguments().forEach(s -> signature(sink, s));
        signature(sink, signature.result());
        signature.throwableSignatures().forEach(s -> signature(sink, s));
    }

    private static void typeParameter(Consumer<ClassDesc> sink, Signature.TypeParam parameter) {
        parameter.classBound().ifPresent(s -> signature(sink, s));
        parameter.interfaceBounds().forEach(s -> signature(sink, s));
    }

    private static void signature(Consumer<ClassDesc> sink, Signature signature) {
        switch (signature) {
            case Signature.ClassTypeSig c -> {
                sink.accept(c.classDesc());
                c.outerType().ifPresent(o -> signature(sink, o));
                for (Signature.TypeArg arg : c.typeArgs()) {
                    if (arg instanceof Signature.TypeArg.Bounded bounded) {
                        signature(sink, bounded.boundType());
                    }
                }
            }
            case Signature.ArrayTypeSig a -> signature(sink, a.componentSignature());
            default -> {
                // base types and type variables name no class
            }
        }
    }

    private static void addDescriptor(Consumer<ClassDesc> sink, String descriptor) {
        if (descriptor.startsWith("(")) {
            addMethodType(sink, MethodTypeDesc.ofDescriptor(descriptor));
        } else {
            sink.accept(ClassDesc.ofDescriptor(descriptor));
        }
    }

    private static void addMethodType(Consumer<ClassDesc> sink, MethodTypeDesc type) {
        sink.accept(type.returnType());
        type.parameterList().forEach(sink);
    }

    private static void addClass(Set<String> out, ClassDesc desc) {
        while (desc.isArray()) {
            desc = desc.componentType();
        }
        if (!desc.isPrimitive()) {
            out.add(binaryName(desc));
        }
    }

    private static String binaryName(ClassDesc desc) {
        String descriptor = desc.descriptorString(); // Lio/jccl/verbs/Verbs$1;
        return descriptor.substring(1, descriptor.length() - 1).replace('/', '.');
    }

    // ---------------------------------------------------------------------------------------------------------------
    // package-info.java
    // ---------------------------------------------------------------------------------------------------------------

    /** A top-level public type: a declaration that starts a line (nested types are indented). */
    private static final Pattern PUBLIC_TOP_LEVEL_TYPE = Pattern.compile(
        "(?m)^public\\s+(?:(?:abstract|final|sealed|non-sealed|static|strictfp)\\s+)*(?:class|interface|enum|record|@interface)\\s");

    /**
     * The packages under the source root {@code sources} that declare at least one public top-level type and have no
     * {@code package-info.java}, sorted.
     */
    public static SortedSet<String> packagesWithoutPackageInfo(Path sources) {
        SortedSet<String> missing = new TreeSet<>();
        if (!Files.isDirectory(sources)) {
            return missing;
        }
        try (Stream<Path> dirs = Files.walk(sources)) {
            for (Path dir : dirs.filter(Files::isDirectory).toList()) {
                if (Files.exists(dir.resolve("package-info.java")) || !hasPublicType(dir)) {
                    continue;
                }
                missing.add(sources.relativize(dir).toString().replace(dir.getFileSystem().getSeparator(), "."));
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot list " + sources, e);
        }
        return missing;
    }

    private static boolean hasPublicType(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            for (Path file : files.filter(p -> p.getFileName().toString().endsWith(".java")).toList()) {
                if (PUBLIC_TOP_LEVEL_TYPE.matcher(Files.readString(file)).find()) {
                    return true;
                }
            }
        }
        return false;
    }

    /**
     * Fails when a package under {@code sources} with public types has no {@code package-info.java}, unless it is in
     * {@code knownMissing} (today's debt, listed by the module's test); also fails when a package in
     * {@code knownMissing} no longer lacks one, so that the list only shrinks.
     */
    public static void checkPackageInfo(Path sources, Set<String> knownMissing) {
        if (!Files.isDirectory(sources)) {
            throw new AssertionError("no source folder " + sources);
        }
        SortedSet<String> missing = packagesWithoutPackageInfo(sources);
        SortedSet<String> added = new TreeSet<>(missing);
        added.removeAll(knownMissing);
        SortedSet<String> stale = new TreeSet<>(knownMissing);
        stale.removeAll(missing);
        List<String> problems = new ArrayList<>();
        if (!added.isEmpty()) {
            problems.add("packages with public types need a package-info.java (what the package is for): "
                + String.join(", ", added));
        }
        if (!stale.isEmpty()) {
            problems.add("these packages have a package-info.java now (or are gone): remove them from the test's"
                + " known-missing list: " + String.join(", ", stale));
        }
        if (!problems.isEmpty()) {
            throw new AssertionError(String.join("\n", problems) + "\n(source root " + sources + ")");
        }
    }
}
