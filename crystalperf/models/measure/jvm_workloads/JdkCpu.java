package cpwork;

import java.io.*;
import java.math.*;
import java.security.*;
import java.text.*;
import java.time.*;
import java.time.format.DateTimeFormatter;
import java.util.*;
import java.util.regex.*;
import java.util.stream.*;
import javax.crypto.*;
import javax.crypto.spec.*;
import javax.xml.parsers.*;
import javax.xml.transform.*;
import javax.xml.transform.dom.DOMSource;
import javax.xml.transform.stream.StreamResult;

/** In-memory computation: text, regex, numbers, collections, streams, security, serialization, XML. */
public final class JdkCpu {
    static volatile Object sink;

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        int n = 200_000 * w.scale;
        w.phase("regex", () -> {
            Pattern p = Pattern.compile("(\\w+)@(\\w+)\\.(com|org|net)");
            StringBuilder sb = new StringBuilder();
            for (int i = 0; i < 20_000; i++) sb.append("user").append(i).append("@host").append(i % 97).append(".org, ");
            String s = sb.toString();
            for (int r = 0; r < 30; r++) {
                Matcher m = p.matcher(s);
                while (m.find()) sink = m.group(2);
                sink = s.split(",\\s*");
                sink = s.replaceAll("user(\\d+)", "u$1");
                sink = Pattern.matches(".*host9.*", s);
            }
        });
        w.phase("text", () -> {
            NumberFormat nf = NumberFormat.getInstance(Locale.US);
            DecimalFormat df = new DecimalFormat("#,##0.000");
            SimpleDateFormat sdf = new SimpleDateFormat("yyyy-MM-dd HH:mm:ss");
            DateTimeFormatter dtf = DateTimeFormatter.ISO_LOCAL_DATE_TIME;
            MessageFormat mf = new MessageFormat("{0} has {1,number,integer} items on {2}");
            for (int i = 0; i < n / 4; i++) {
                String a = nf.format(i * 1.5);
                sink = nf.parse(a);
                sink = df.format(i / 7.0);
                String d = sdf.format(new Date(1_600_000_000_000L + i * 1000L));
                sink = sdf.parse(d);
                String t = dtf.format(LocalDateTime.of(2020, 1, 1, 0, 0).plusSeconds(i));
                sink = LocalDateTime.parse(t, dtf);
                sink = mf.format(new Object[] {"box", i, "monday"});
                sink = String.format("%08d %s %.3f", i, "x", i / 3.0);
            }
            Collator c = Collator.getInstance(Locale.FRANCE);
            List<String> words = new ArrayList<>();
            for (int i = 0; i < 50_000; i++) words.add("mot" + (i * 7919 % 50_000));
            words.sort(c);
            BreakIterator bi = BreakIterator.getWordInstance();
            bi.setText(String.join(" ", words));
            while (bi.next() != BreakIterator.DONE) { }
            sink = Normalizer.normalize(String.join("é", words), Normalizer.Form.NFD);
        });
        w.phase("numbers", () -> {
            BigInteger f = BigInteger.ONE;
            for (int i = 1; i < 3000; i++) f = f.multiply(BigInteger.valueOf(i));
            sink = f.toString();
            sink = f.mod(BigInteger.valueOf(1_000_000_007)).modPow(BigInteger.TEN, BigInteger.valueOf(97));
            BigDecimal x = BigDecimal.ONE;
            MathContext mc = new MathContext(200);
            for (int i = 1; i < 20_000; i++) x = x.add(BigDecimal.ONE.divide(BigDecimal.valueOf(i), mc), mc);
            sink = x.sqrt(mc).toPlainString();
            for (int i = 0; i < 200; i++) sink = BigInteger.probablePrime(256, w.random);
            double acc = 0;
            for (int i = 0; i < n * 10; i++) acc += Math.sin(i) * Math.log1p(i) + StrictMath.cbrt(i);
            sink = acc;
        });
        w.phase("collections", () -> {
            for (int r = 0; r < 5; r++) {
                Map<String, Integer> hm = new HashMap<>();
                TreeMap<Integer, String> tm = new TreeMap<>();
                LinkedHashMap<Integer, Integer> lhm = new LinkedHashMap<>();
                ArrayList<Integer> al = new ArrayList<>();
                LinkedList<Integer> ll = new LinkedList<>();
                ArrayDeque<Integer> dq = new ArrayDeque<>();
                PriorityQueue<Integer> pq = new PriorityQueue<>();
                HashSet<Long> hs = new HashSet<>();
                for (int i = 0; i < n; i++) {
                    int v = w.random.nextInt();
                    hm.merge("k" + (v % 10_000), 1, Integer::sum);
                    tm.put(v, "v");
                    lhm.put(v % 5000, i);
                    al.add(v); ll.add(v); dq.addLast(v); pq.add(v); hs.add((long) v);
                }
                Collections.sort(al);
                Integer[] arr = al.toArray(new Integer[0]);
                Arrays.sort(arr, Comparator.reverseOrder());
                int[] prim = al.stream().mapToInt(Integer::intValue).toArray();
                Arrays.sort(prim);
                Arrays.parallelSort(prim.clone());
                Collections.shuffle(al, w.random);
                while (!pq.isEmpty()) pq.poll();
                sink = tm.headMap(0).size() + tm.tailMap(0).size();
                sink = Arrays.binarySearch(prim, 42);
                Iterator<Integer> it = ll.iterator();
                while (it.hasNext()) if (it.next() % 2 == 0) it.remove();
            }
        });
        w.phase("streams", () -> {
            for (int r = 0; r < 5; r++) {
                sink = IntStream.range(0, n).boxed().collect(Collectors.groupingBy(i -> i % 100, Collectors.counting()));
                sink = IntStream.range(0, n).mapToObj(i -> "s" + i).filter(s -> s.hashCode() % 3 == 0).sorted().collect(Collectors.joining(","));
                sink = LongStream.range(0, n * 5L).parallel().map(i -> i * i % 7).sum();
                sink = Stream.iterate(1L, x -> x * 3 % 1_000_003).limit(n).distinct().count();
            }
        });
        w.phase("strings", () -> {
            for (int r = 0; r < 10; r++) {
                StringBuilder sb = new StringBuilder();
                for (int i = 0; i < n; i++) sb.append(i).append(',');
                String s = sb.toString();
                sink = s.toUpperCase().toLowerCase().indexOf("99999");
                sink = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
                sink = new String((byte[]) sink, java.nio.charset.StandardCharsets.UTF_8).intern().length();
                sink = Base64.getEncoder().encodeToString(s.getBytes());
                sink = Base64.getDecoder().decode((String) sink);
                for (int i = 0; i < 10_000; i++) sink = UUID.randomUUID().toString();
                sink = new StringTokenizer(s, ",").countTokens();
                sink = s.chars().filter(Character::isDigit).count();
            }
        });
        w.phase("security", () -> {
            byte[] data = w.bytes(1 << 20);
            for (String alg : new String[] {"MD5", "SHA-1", "SHA-256", "SHA-512", "SHA3-256"}) {
                MessageDigest md = MessageDigest.getInstance(alg);
                for (int i = 0; i < 20 * w.scale; i++) sink = md.digest(data);
            }
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(new byte[32], "HmacSHA256"));
            for (int i = 0; i < 20; i++) sink = mac.doFinal(data);
            KeyGenerator kg = KeyGenerator.getInstance("AES");
            kg.init(128);
            SecretKey key = kg.generateKey();
            for (String mode : new String[] {"AES/CBC/PKCS5Padding", "AES/GCM/NoPadding", "AES/CTR/NoPadding"}) {
                for (int i = 0; i < 10 * w.scale; i++) {
                    Cipher c = Cipher.getInstance(mode);
                    c.init(Cipher.ENCRYPT_MODE, key);
                    byte[] enc = c.doFinal(data);
                    Cipher d = Cipher.getInstance(mode);
                    d.init(Cipher.DECRYPT_MODE, key, c.getParameters());
                    sink = d.doFinal(enc);
                }
            }
            KeyPairGenerator kpg = KeyPairGenerator.getInstance("RSA");
            kpg.initialize(2048);
            KeyPair kp = null;
            for (int i = 0; i < 6; i++) kp = kpg.generateKeyPair();
            Signature sig = Signature.getInstance("SHA256withRSA");
            for (int i = 0; i < 100; i++) { sig.initSign(kp.getPrivate()); sig.update(data, 0, 4096); byte[] s = sig.sign(); sig.initVerify(kp.getPublic()); sig.update(data, 0, 4096); sink = sig.verify(s); }
            KeyPairGenerator ec = KeyPairGenerator.getInstance("EC");
            ec.initialize(256);
            Signature es = Signature.getInstance("SHA256withECDSA");
            for (int i = 0; i < 200; i++) { KeyPair e = ec.generateKeyPair(); es.initSign(e.getPrivate()); es.update(data, 0, 1024); sink = es.sign(); }
            SecretKeyFactory f = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256");
            for (int i = 0; i < 5; i++) sink = f.generateSecret(new PBEKeySpec("secret".toCharArray(), new byte[16], 20_000, 256));
            SecureRandom sr = new SecureRandom();
            for (int i = 0; i < 1000; i++) sr.nextBytes(new byte[64]);
        });
        w.phase("serialization", () -> {
            ArrayList<Object> obj = new ArrayList<>();
            for (int i = 0; i < 50_000; i++) obj.add(Map.of("k", i, "s", "v" + i));
            for (int r = 0; r < 5; r++) {
                ByteArrayOutputStream bo = new ByteArrayOutputStream();
                try (ObjectOutputStream out = new ObjectOutputStream(bo)) { out.writeObject(obj); }
                try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bo.toByteArray()))) { sink = in.readObject(); }
            }
        });
        w.phase("xml", () -> {
            DocumentBuilder db = DocumentBuilderFactory.newInstance().newDocumentBuilder();
            org.w3c.dom.Document doc = db.newDocument();
            org.w3c.dom.Element root = doc.createElement("root");
            doc.appendChild(root);
            for (int i = 0; i < 20_000; i++) { org.w3c.dom.Element e = doc.createElement("item"); e.setAttribute("id", "" + i); e.setTextContent("text " + i); root.appendChild(e); }
            Transformer t = TransformerFactory.newInstance().newTransformer();
            for (int r = 0; r < 3; r++) {
                StringWriter sw = new StringWriter();
                t.transform(new DOMSource(doc), new StreamResult(sw));
                byte[] xml = sw.toString().getBytes();
                sink = db.parse(new ByteArrayInputStream(xml));
                SAXParserFactory.newInstance().newSAXParser().parse(new ByteArrayInputStream(xml), new org.xml.sax.helpers.DefaultHandler());
                javax.xml.stream.XMLStreamReader xr = javax.xml.stream.XMLInputFactory.newInstance().createXMLStreamReader(new ByteArrayInputStream(xml));
                while (xr.hasNext()) xr.next();
            }
        });
    }
}
