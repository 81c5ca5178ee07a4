package cpwork;

import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import java.util.concurrent.locks.*;

/** Threads that wait: pools and queues, locks and monitors under contention, latches, sleeps. */
public final class JdkConcurrent {
    static long spin(int n) { long x = 0; for (int i = 0; i < n; i++) x += (x ^ i) * 31; return x; }

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        int tasks = 2000 * w.scale;
        w.phase("pools", () -> {
            ExecutorService fixed = Executors.newFixedThreadPool(4);
            List<Future<Long>> fs = new ArrayList<>();
            for (int i = 0; i < tasks; i++) { final int k = i; fs.add(fixed.submit(() -> { Thread.sleep(k % 3); return spin(2000); })); }
            for (Future<Long> f : fs) f.get();
            fixed.invokeAll(Collections.nCopies(200, () -> { Thread.sleep(2); return 1; }));
            fixed.shutdown(); fixed.awaitTermination(1, TimeUnit.MINUTES);
            ScheduledExecutorService sched = Executors.newScheduledThreadPool(2);
            CountDownLatch done = new CountDownLatch(200);
            for (int i = 0; i < 200; i++) sched.schedule(done::countDown, i % 20, TimeUnit.MILLISECONDS);
            done.await();
            ScheduledFuture<?> tick = sched.scheduleAtFixedRate(() -> spin(100), 0, 2, TimeUnit.MILLISECONDS);
            Thread.sleep(300); tick.cancel(false);
            sched.shutdown();
            ExecutorService cached = Executors.newCachedThreadPool();
            for (int i = 0; i < 300; i++) cached.execute(() -> { try { Thread.sleep(5); } catch (InterruptedException e) { } });
            cached.shutdown(); cached.awaitTermination(1, TimeUnit.MINUTES);
            ForkJoinPool fj = new ForkJoinPool(3);
            fj.submit(() -> java.util.stream.IntStream.range(0, 2000).parallel().map(i -> { try { Thread.sleep(i % 2); } catch (InterruptedException e) { } return i; }).sum()).get();
            fj.shutdown();
            List<CompletableFuture<Long>> cfs = new ArrayList<>();
            for (int i = 0; i < 500; i++) cfs.add(CompletableFuture.supplyAsync(() -> { try { Thread.sleep(1); } catch (InterruptedException e) { } return spin(100); }).thenApply(x -> x + 1));
            CompletableFuture.allOf(cfs.toArray(new CompletableFuture[0])).get();
        });
        w.phase("queues", () -> {
            for (BlockingQueue<Integer> q : List.<BlockingQueue<Integer>>of(new ArrayBlockingQueue<>(16), new LinkedBlockingQueue<>(16), new SynchronousQueue<>(), new LinkedTransferQueue<>(), new PriorityBlockingQueue<>(), new LinkedBlockingDeque<>(16))) {
                Thread producer = new Thread(() -> { try { for (int i = 0; i < tasks; i++) { q.put(i); if (i % 50 == 0) Thread.sleep(1); } q.put(-1); } catch (InterruptedException e) { } });
                producer.start();
                while (true) { Integer v = q.poll(1, TimeUnit.SECONDS); if (v == null || v < 0) break; spin(200); }
                producer.join();
            }
            Exchanger<Integer> ex = new Exchanger<>();
            Thread t = new Thread(() -> { try { for (int i = 0; i < 500; i++) ex.exchange(i); } catch (InterruptedException e) { } });
            t.start();
            for (int i = 0; i < 500; i++) ex.exchange(i);
            t.join();
        });
        w.phase("locks", () -> {
            ReentrantLock lock = new ReentrantLock();
            ReentrantReadWriteLock rw = new ReentrantReadWriteLock();
            StampedLock stamped = new StampedLock();
            Semaphore sem = new Semaphore(2);
            Object monitor = new Object();
            long[] shared = new long[1];
            List<Thread> ts = new ArrayList<>();
            for (int k = 0; k < 4; k++) {
                Thread t = new Thread(() -> {
                    for (int i = 0; i < tasks / 2; i++) {
                        lock.lock(); try { shared[0] += spin(3000); } finally { lock.unlock(); }
                        synchronized (monitor) { shared[0] += spin(3000); }
                        rw.writeLock().lock(); try { shared[0] += spin(1000); } finally { rw.writeLock().unlock(); }
                        rw.readLock().lock(); try { spin(500); } finally { rw.readLock().unlock(); }
                        long st = stamped.writeLock(); try { shared[0] += spin(1000); } finally { stamped.unlockWrite(st); }
                        try { sem.acquire(); try { spin(2000); } finally { sem.release(); } } catch (InterruptedException e) { }
                    }
                });
                ts.add(t); t.start();
            }
            for (Thread t : ts) t.join();
            Condition cond = lock.newCondition();
            Thread waiter = new Thread(() -> { lock.lock(); try { for (int i = 0; i < 200; i++) cond.await(1, TimeUnit.MILLISECONDS); } catch (InterruptedException e) { } finally { lock.unlock(); } });
            waiter.start(); waiter.join();
        });
        w.phase("monitors", () -> {
            Object mon = new Object();
            int[] turn = new int[1];
            Thread a = new Thread(() -> { synchronized (mon) { for (int i = 0; i < 1000; i++) { while (turn[0] != 0) try { mon.wait(); } catch (InterruptedException e) { } turn[0] = 1; mon.notifyAll(); } } });
            Thread b = new Thread(() -> { synchronized (mon) { for (int i = 0; i < 1000; i++) { while (turn[0] != 1) try { mon.wait(); } catch (InterruptedException e) { } turn[0] = 0; mon.notifyAll(); } } });
            a.start(); b.start(); a.join(); b.join();
            Vector<Integer> v = new Vector<>();
            Hashtable<Integer, Integer> h = new Hashtable<>();
            StringBuffer sb = new StringBuffer();
            List<Thread> ts = new ArrayList<>();
            for (int k = 0; k < 4; k++) { Thread t = new Thread(() -> { for (int i = 0; i < 200_000; i++) { v.add(i); h.put(i % 1000, i); if (i % 100 == 0) sb.append(i); } }); ts.add(t); t.start(); }
            for (Thread t : ts) t.join();
        });
        w.phase("sync-aids", () -> {
            CyclicBarrier barrier = new CyclicBarrier(3);
            Phaser phaser = new Phaser(3);
            List<Thread> ts = new ArrayList<>();
            for (int k = 0; k < 3; k++) { final int me = k; Thread t = new Thread(() -> { try { for (int i = 0; i < 300; i++) { spin(1000 * (me + 1)); Thread.sleep(me); barrier.await(); phaser.arriveAndAwaitAdvance(); } } catch (Exception e) { } }); ts.add(t); t.start(); }
            for (Thread t : ts) t.join();
            AtomicLong al = new AtomicLong();
            LongAdder adder = new LongAdder();
            ConcurrentHashMap<Integer, Integer> chm = new ConcurrentHashMap<>();
            ts.clear();
            for (int k = 0; k < 3; k++) { Thread t = new Thread(() -> { for (int i = 0; i < 500_000; i++) { al.incrementAndGet(); adder.increment(); chm.merge(i % 4096, 1, Integer::sum); } }); ts.add(t); t.start(); }
            for (Thread t : ts) t.join();
            for (int i = 0; i < 300; i++) { Thread.sleep(1); TimeUnit.MICROSECONDS.sleep(500); LockSupport.parkNanos(500_000); Thread.yield(); }
            Timer timer = new Timer();
            CountDownLatch l = new CountDownLatch(100);
            for (int i = 0; i < 100; i++) timer.schedule(new TimerTask() { public void run() { l.countDown(); } }, i % 30);
            l.await(); timer.cancel();
        });
    }
}
