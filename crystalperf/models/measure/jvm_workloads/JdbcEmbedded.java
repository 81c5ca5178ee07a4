package cpwork;

import java.sql.*;

/** java.sql over embedded databases that keep their data in files: H2, Apache Derby, HSQLDB. */
public final class JdbcEmbedded {
    static void exercise(Connection c, int rows) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(100), v DOUBLE)");
        }
        c.setAutoCommit(false);
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO t VALUES (?, ?, ?)")) {
            for (int i = 0; i < rows; i++) {
                ps.setInt(1, i); ps.setString(2, "name " + i); ps.setDouble(3, i * 0.5);
                ps.addBatch();
                if (i % 500 == 499) { ps.executeBatch(); c.commit(); }
            }
            if (rows % 500 != 0) ps.executeBatch();  // an empty batch is an error in HSQLDB
            c.commit();
        }
        c.setAutoCommit(true);
        try (PreparedStatement ps = c.prepareStatement("UPDATE t SET v = v + 1 WHERE id = ?")) {
            for (int i = 0; i < rows / 10; i++) { ps.setInt(1, i * 7 % rows); ps.executeUpdate(); }
        }
        try (Statement s = c.createStatement()) {
            for (int r = 0; r < 5; r++) {
                try (ResultSet rs = s.executeQuery("SELECT name, v FROM t WHERE v > " + r + " ORDER BY name DESC")) { while (rs.next()) rs.getString(1); }
                try (ResultSet rs = s.executeQuery("SELECT COUNT(*), SUM(v), AVG(v) FROM t GROUP BY MOD(id, 17)")) { while (rs.next()) rs.getDouble(2); }
            }
            s.execute("DELETE FROM t WHERE MOD(id, 3) = 0");
            s.execute("DROP TABLE t");
        }
    }

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        int rows = 20_000 * w.scale;
        w.phase("h2", () -> {
            try (Connection c = DriverManager.getConnection("jdbc:h2:file:" + w.dir.resolve("h2db"), "sa", "")) { exercise(c, rows); }
        });
        w.phase("h2-tcp", () -> {
            org.h2.tools.Server server = org.h2.tools.Server.createTcpServer("-tcpPort", "0", "-baseDir", w.dir.toString(), "-ifNotExists").start();
            try (Connection c = DriverManager.getConnection("jdbc:h2:tcp://127.0.0.1:" + server.getPort() + "/h2remote", "sa", "")) { exercise(c, rows / 2); }
            finally { server.stop(); }
        });
        w.phase("hsqldb-server", () -> {
            org.hsqldb.server.Server server = new org.hsqldb.server.Server();
            server.setDatabaseName(0, "remote");
            server.setDatabasePath(0, "file:" + w.dir.resolve("hsqlremote/db"));
            server.setAddress("127.0.0.1");
            server.setPort(20000 + (int) (ProcessHandle.current().pid() % 20000));
            server.setSilent(true);
            server.setLogWriter(null);
            server.start();
            try (Connection c = DriverManager.getConnection("jdbc:hsqldb:hsql://127.0.0.1:" + server.getPort() + "/remote", "SA", "")) { exercise(c, rows / 2); }
            finally { server.shutdown(); }
        });
        w.phase("derby", () -> {
            System.setProperty("derby.system.home", w.dir.toString());
            System.setProperty("derby.stream.error.file", w.dir.resolve("derby.log").toString());
            try (Connection c = DriverManager.getConnection("jdbc:derby:" + w.dir.resolve("derbydb") + ";create=true")) { exercise(c, rows); }
            try { DriverManager.getConnection("jdbc:derby:;shutdown=true"); } catch (SQLException expected) { }
        });
        w.phase("hsqldb", () -> {
            try (Connection c = DriverManager.getConnection("jdbc:hsqldb:file:" + w.dir.resolve("hsql/db"), "SA", "")) {
                exercise(c, rows);
                try (Statement s = c.createStatement()) { s.execute("SHUTDOWN"); }
            }
        });
    }
}
